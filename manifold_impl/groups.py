"""The group zoo in torch. Mirror of ``reference/groups.py`` (read the math there).

Same classes, names, signatures and coordinate order. Performance notes: ``hat``/``vee`` use
index scatter/gather instead of the reference's dense basis. ``Torus.exp`` and ``Torus.mul`` are
elementwise (no matrix products); ``BlockOrthogonal.exp`` works on the [..., k, b, b] blocks (its
``mul`` stays one matmul, see there). Closed-form exponentials replace the general one where the
algebra allows (all checked against scipy.linalg.expm, values and gradients, in the tests):

    2×2 with a² = −θ² I (so(2), the b = 2 blocks of BO, su(2)):
        exp(a) = cos θ · I + (sin θ / θ) · a,                     θ² = ‖a‖²_F / 2
    so(3) (Rodrigues):
        exp(a) = I + (sin θ / θ) · a + ((1 − cos θ) / θ²) · a²,   θ² = ‖a‖²_F / 2

with (1 − cos θ)/θ² = ½ (sin(θ/2)/(θ/2))² and cos θ = 1 − θ²/2 · (sin(θ/2)/(θ/2))², so that
one function, sin θ/θ of θ² (``_sin_over_theta``), carries both without cancellation. A float32
argument is evaluated in float64 and rounded once (``_closed_form``): no orthogonality error of one
sign per factor, so long float32 products drift like the dense exponential's.
"""

from __future__ import annotations

import math

import torch

from manifold_impl.draws import drawing_device
from manifold_impl.linalg import (
    _expm_saving, _expm_vjp, dagger, default_atol, diagonal, expm, frobenius_inner, from_blocks, phase_fixed_qr,
    polar, skew, special_polar, special_unitary_polar, sum_zero_basis, to_blocks,
)
from manifold_impl.precision import full_precision
from reference.checks import group_arguments

SETTLE_STEPS = 3  # mirror of reference.groups.SETTLE_STEPS
_REAL = (torch.float32, torch.float64)
_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _check_batch_shape(batch_shape):
    batch_shape = tuple(batch_shape)
    if not all(isinstance(s, int) and s >= 0 for s in batch_shape):
        raise ValueError(f"batch_shape must be a tuple of non-negative ints, got {batch_shape!r}")
    return batch_shape


class Group:
    """A closed matrix group of n×n matrices (mirror of reference.groups.Group)."""

    name = ""
    is_complex = False
    is_compact = True

    def __init__(self, n):
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        self.n = n
        self._rows, self._cols = torch.triu_indices(n, n, 1)  # pairs i < j, row-major

    def __repr__(self):
        return f"{type(self).__name__}(n={self.n})"

    @property
    def dim(self):
        """Real dimension of the Lie algebra g."""
        return self.n * (self.n - 1) // 2

    def element_dtype(self, dtype=None):
        """torch dtype of group elements for a working precision (default: torch's default)."""
        real = torch.get_default_dtype() if dtype is None else dtype
        real = _REAL_OF.get(real, real)
        if real not in _REAL:
            raise TypeError(f"dtype must be float32 or float64 (or complex64/128), got {real}")
        return _COMPLEX_OF[real] if self.is_complex else real

    # ---- the Lie algebra ------------------------------------------------------------------
    def proj(self, m):
        raise NotImplementedError

    def hat(self, c):
        """Skew matrix with c_k/√2 at the k-th pair (i, j) and −c_k/√2 at (j, i).

        One gather from [0, c, −c]/√2 (``_pair_index``): faster forward and backward than writing
        the pairs into a zero matrix.
        """
        return _gather_matrix(torch.cat([c.new_zeros(*c.shape[:-1], 1), c, -c], dim=-1) / math.sqrt(2),
                              self._pair_index(True, c.device), self.n)

    def _cached(self, key, build):
        """``build()`` computed once per ``key``: the index tensors, masks and bases the algebra reads,
        kept on each device they are used on, so no call copies or rebuilds them. Code that
        ``torch.compile`` traces cannot fill the cache: there a missing constant is built in the graph."""
        cache = self.__dict__.get("_constants", {})
        if key in cache:
            return cache[key]
        if torch.compiler.is_compiling():
            return build()
        cache[key] = build()
        self.__dict__["_constants"] = cache
        return cache[key]

    def _pair_index(self, skew, device):
        """``[n²]`` positions into [0, v, ±v] on ``device``: entry (i, j) of the k-th pair reads v_k at
        1 + k, entry (j, i) reads 1 + p + k (skew: −v_k) or 1 + k (symmetric); everything else 0."""
        def build():
            pairs, n = self._rows.numel(), self.n
            index = torch.zeros(n * n, dtype=torch.long)
            index[self._rows * n + self._cols] = torch.arange(1, pairs + 1)
            index[self._cols * n + self._rows] = torch.arange(1, pairs + 1) + (pairs if skew else 0)
            return index.to(device)
        return self._cached(("pair_index", skew, torch.device(device)), build)

    def _pairs(self, device):
        """The pairs (i, j), i < j, as two index tensors on ``device``."""
        return self._cached(("pairs", torch.device(device)), lambda: (self._rows.to(device), self._cols.to(device)))

    def vee(self, a):
        rows, cols = self._pairs(a.device)
        return math.sqrt(2) * a.real[..., rows, cols]

    def exp(self, a):
        return expm(a)

    def _support(self):
        """Mirror of the reference: ``[s]`` row-major positions of the entries the group allows to be
        non-zero, or None for all n²."""
        return None

    def _support_index(self, device):
        """``_support()`` on ``device``, computed once per device."""
        def build():
            support = self._support()
            return None if support is None else support.to(device)
        return self._cached(("support", torch.device(device)), build)

    @property
    def num_features(self):
        support = self._support_index("cpu")
        size = self.n * self.n if support is None else support.numel()
        return size * (2 if self.is_complex else 1)

    def features(self, x):
        """``[..., n, n] -> [..., num_features]``; see the reference."""
        flat = x.flatten(-2)
        support = self._support_index(x.device)
        if support is not None:
            flat = flat.index_select(-1, support)
        if self.is_complex:
            return torch.cat([flat.real, flat.imag], dim=-1)
        return flat.real

    def random_algebra(self, batch_shape=(), *, generator, scale=1.0, dtype=None, device=None):
        batch_shape = _check_batch_shape(batch_shape)
        real = _REAL_OF.get(self.element_dtype(dtype), self.element_dtype(dtype))
        c = scale * torch.randn(batch_shape + (self.dim,), generator=generator, dtype=real,
                                device=drawing_device(generator, device))
        return self.hat(c.to(device)).to(self.element_dtype(dtype))

    # ---- the group ------------------------------------------------------------------------
    def mul(self, x, y):
        return x @ y

    def inv(self, x):
        return dagger(x)

    def inner(self, a, b):
        return frobenius_inner(a, b)

    def identity(self, batch_shape=(), dtype=None, device=None):
        batch_shape = _check_batch_shape(batch_shape)
        eye = torch.eye(self.n, dtype=self.element_dtype(dtype), device=device)
        return eye.expand(*batch_shape, self.n, self.n).clone()

    def random(self, batch_shape=(), *, generator, dtype=None, device=None):
        batch_shape = _check_batch_shape(batch_shape)
        return self._haar(batch_shape, generator, self.element_dtype(dtype), drawing_device(generator, device)).to(device)

    def _haar(self, batch_shape, generator, dtype, device):
        raise NotImplementedError

    def _randn(self, shape, generator, dtype, device):
        """Standard normal real or (for complex dtype) complex with E|z|² = 1."""
        real = _REAL_OF.get(dtype, dtype)
        if dtype.is_complex:
            pair = torch.randn(shape + (2,), generator=generator, dtype=real, device=device)
            return torch.view_as_complex(pair) / math.sqrt(2)
        return torch.randn(shape, generator=generator, dtype=real, device=device)

    def distance(self, x):
        """max |x^H x − I| per matrix, ``[..., n, n] -> [...]`` (0 for GL), in x's own precision under
        autocast too; see the reference."""
        if not self.is_compact:
            return x.real.new_zeros(x.shape[:-2])
        eye = torch.eye(self.n, dtype=x.dtype, device=x.device)
        with full_precision(x.device):
            return (dagger(x) @ x - eye).abs().amax(dim=(-2, -1))

    def is_member(self, x, atol=None, explain=False):
        reason = self._membership_failure(x, atol)
        return (reason is None, reason) if explain else reason is None

    def _membership_failure(self, x, atol):
        n = self.n
        if not isinstance(x, torch.Tensor):
            return f"expected a torch.Tensor, got {type(x).__name__}"
        if x.dim() < 2 or tuple(x.shape[-2:]) != (n, n):
            return f"expected shape [..., {n}, {n}], got {tuple(x.shape)}"
        if not (x.is_floating_point() or x.is_complex()):
            return f"expected a floating dtype, got {x.dtype}"
        if x.is_complex() and not self.is_complex:
            return f"{self.name}({n}) is a real group but the matrix is complex ({x.dtype})"
        if not torch.isfinite(x).all():
            return "the matrix has non-finite entries"
        x = x.detach()
        atol = default_atol(_REAL_OF.get(x.dtype, x.dtype), n) if atol is None else atol
        if self.is_compact and x.numel():
            err = self.distance(x).max().item()
            if err > atol:
                return f"not unitary: max |x^H x - I| = {err:.3g} > atol = {atol:.3g}"
        return self._structure_failure(x, atol) if x.numel() else None

    def _structure_failure(self, x, atol):
        return None

    def _violation(self, x, atol=None):
        """Whether any matrix of ``x: [..., n, n]`` (shape and dtype already valid) fails
        ``is_member``: a 0-dim bool tensor on x's device, so a caller pays one host read for any
        number of checks (``_check_on_groups``); ``is_member`` says why."""
        x = x.detach()
        if not x.numel():
            return torch.zeros((), dtype=torch.bool, device=x.device)
        atol = default_atol(_REAL_OF.get(x.dtype, x.dtype), self.n) if atol is None else atol
        bad = ~torch.isfinite(x).all()
        if self.is_compact:
            bad = bad | (self.distance(x).amax() > atol)
        structure = self._structure_violation(x, atol)
        return bad if structure is None else bad | structure

    def _structure_violation(self, x, atol):
        """The structure test of ``_structure_failure`` as a 0-dim bool tensor (None: no structure)."""
        return None

    # ---- the manifold ---------------------------------------------------------------------
    def proj_tangent(self, x, u):
        return self.mul(x, self.proj(self.mul(self.inv(x), u)))

    def retr(self, x, u):
        return self.mul(x, self.exp(self.proj(self.mul(self.inv(x), u))))

    def nearest(self, m):
        raise NotImplementedError

    # ---- the packed form (see the reference) ----------------------------------------------
    def pack(self, x):
        return x

    def unpack(self, p):
        return p

    def packed_exp(self, c):
        return self.exp(self.hat(c))

    def packed_mul(self, p, q):
        return self.mul(p, q)

    def packed_features(self, p):
        return self.features(p)

    # ---- packed_exp's VJP written out (for code that runs no autograd: the fused recurrence) ----
    def _exp_saving(self, a):
        """``(exp(a), saved)``: the same bits as ``exp``, and the tensors ``_exp_vjp`` needs."""
        return _expm_saving(a)

    def _exp_vjp(self, saved, grad):
        """ḡ_a of ``exp`` at the ``a`` that ``_exp_saving`` saved, for ``grad = ḡ: [..., n, n]``."""
        return _expm_vjp(saved, grad)

    def _packed_exp_saving(self, c):
        """``(packed_exp(c), saved)``, the same bits as ``packed_exp``, for ``_packed_exp_vjp``."""
        return self._exp_saving(self.hat(c))

    def _packed_exp_vjp(self, saved, grad):
        """ḡ_c ``[..., dim]`` of ``packed_exp`` for ``grad = ḡ [..., *packed]``: exp's VJP, then hat's
        adjoint vee ∘ proj (the coordinates are orthonormal)."""
        return self.vee(self.proj(self._exp_vjp(saved, grad)))

    def refine(self, x):
        if not self.is_compact:
            return x
        return 0.5 * self.mul(x, 3 * torch.eye(self.n, dtype=x.dtype, device=x.device) - self.mul(self.inv(x), x))

    def defect(self, x):
        return self.distance(x)

    def settle(self, x):
        """Mirror of the reference: the matrices of ``x`` whose defect exceeds half the membership
        tolerance moved back onto the group, the others unchanged; computed for all and chosen by
        ``torch.where``, so nothing is read back."""
        if not self.is_compact:
            return x
        moved = x
        for _ in range(SETTLE_STEPS):
            moved = self.refine(moved)
        far = self.defect(x) > default_atol(_REAL_OF.get(x.dtype, x.dtype), self.n) / 2
        return torch.where(far[..., None, None], self._unit_determinant(moved), x)

    def _unit_determinant(self, x):
        return x

    def packed_settle(self, p):
        """``settle`` on the packed form ``[..., *packed]`` (``pack``); T and BO settle their diagonal
        or blocks without building the n×n matrix."""
        return self.pack(self.settle(self.unpack(p)))

    def _settle_where_far(self, p, moved, defect):
        """``moved`` where ``defect`` (per element of the batch) exceeds half the membership tolerance, else ``p``."""
        far = defect > default_atol(_REAL_OF.get(p.dtype, p.dtype), self.n) / 2
        return torch.where(far.reshape(far.shape + (1,) * (p.dim() - far.dim())), moved, p)


def _sin_over_theta(theta2):
    """sin θ / θ as a function of θ² ≥ 0, ``[...] -> [...]``, smooth through θ = 0.

    Below θ² = (5040 eps)^(1/3) its Taylor series 1 − θ²/6 + θ⁴/120 (remainder ≤ θ⁶/5040 ≤ eps);
    above, sin θ / θ itself, evaluated at a safe argument where the series is used, so neither
    branch yields 0/0 in the value or the gradient.
    """
    small = theta2 < (5040 * torch.finfo(theta2.dtype).eps) ** (1 / 3)
    theta = torch.where(small, torch.ones_like(theta2), theta2).sqrt()
    return torch.where(small, 1 - theta2 / 6 * (1 - theta2 / 20), torch.sin(theta) / theta)


def _half_angle_terms(a):
    """θ², sin θ / θ and ½ (sin(θ/2)/(θ/2))² = (1 − cos θ)/θ² for θ² = ‖a‖²_F / 2, each ``[..., 1, 1]``."""
    squares = a.real ** 2 + (a.imag ** 2 if a.is_complex() else 0)
    theta2 = 0.5 * squares.sum(dim=(-2, -1), keepdim=True)
    return theta2, _sin_over_theta(theta2), 0.5 * _sin_over_theta(theta2 / 4) ** 2


def _exp_rotation(a):
    """exp of 2×2 ``a: [..., 2, 2]`` with a² = −θ² I (so(2), su(2)): cos θ · I + (sin θ / θ) · a."""
    theta2, sinc, versine = _half_angle_terms(a)
    eye = torch.eye(2, dtype=a.dtype, device=a.device)
    return (1 - theta2 * versine) * eye + sinc * a


def _exp_rodrigues(a):
    """exp of ``a: [..., 3, 3]`` in so(3) by Rodrigues' formula: I + (sin θ/θ) a + ((1 − cos θ)/θ²) a²."""
    _, sinc, versine = _half_angle_terms(a)
    eye = torch.eye(3, dtype=a.dtype, device=a.device)
    return eye + sinc * a + versine * (a @ a)


_WIDER = {torch.float32: torch.float64, torch.complex64: torch.complex128}


def _closed_form(formula, a):
    """``formula(a)`` evaluated in float64 (complex128) and rounded back to ``a``'s dtype.

    In float32 the closed forms' own roundings share a sign: the series of sin θ/θ stops at θ⁴,
    whose remainder θ⁶/5040 (up to eps at the switch) always shortens sin θ, and cos θ as
    1 − θ² · versine rounds the small versine term again; random BO(8) factors carried
    tr(XᴴX − I) −2.5e-8 on average, so a float32 product of 10,000 of them drifted linearly. The
    float64 value rounded once is the correctly rounded exponential up to float64's error: no
    sign, the spread of scipy's exponential rounded to float32, at the cost of a cast of the
    small blocks (parity_tests/test_drift.py).
    """
    wide = _WIDER.get(a.dtype)
    return formula(a) if wide is None else formula(a.to(wide)).to(a.dtype)


def _sin_over_theta_slope(theta2):
    """d(sin θ / θ)/d(θ²) as a function of θ² ≥ 0, ``[...] -> [...]``: (cos θ − sin θ/θ) / (2θ²),
    below θ² = 0.01 its series −1/6 + θ²/60 − θ⁴/1680 + θ⁶/90720 (remainder below 1e-15 of it)."""
    small = theta2 < 0.01
    safe = torch.where(small, torch.ones_like(theta2), theta2)
    theta = safe.sqrt()
    direct = (torch.cos(theta) - torch.sin(theta) / theta) / (2 * safe)
    series = -1 / 6 + theta2 / 60 * (1 - theta2 / 28 * (1 - theta2 / 54))
    return torch.where(small, series, direct)


def _closed_form_vjp(a, grad, rodrigues):
    """ḡ_a of ``_closed_form(_exp_rodrigues if rodrigues else _exp_rotation, a)`` for ``grad`` = ḡ
    (``[..., m, m]``), evaluated in float64 like the value.

    Both forms are α I + β a + γ a² with coefficients of θ² = ‖a‖²_F / 2, whose gradient is a:
    rotation α = 1 − θ² v, β = s, γ = 0; Rodrigues α = 1, β = s, γ = v (s = sin θ/θ, v = (1 − cos θ)/θ²
    = ½ s(θ²/4)²). So ḡ_a = β ḡ + γ (ḡ aᴴ + aᴴ ḡ) + (α′ Re tr ḡ + β′ ⟨a, ḡ⟩ + γ′ ⟨a², ḡ⟩) a, primes
    d/dθ², ⟨x, y⟩ = Re tr(xᴴ y).
    """
    dtype = grad.dtype
    a, grad = a.to(_WIDER.get(a.dtype, a.dtype)), grad.to(_WIDER.get(dtype, dtype))
    theta2, sinc, versine = _half_angle_terms(a)
    half = _sin_over_theta(theta2 / 4)
    versine_slope = half * _sin_over_theta_slope(theta2 / 4) / 4  # v′ = s(θ²/4) s′(θ²/4) / 4
    slope = _sin_over_theta_slope(theta2) * frobenius_inner(a, grad)[..., None, None]
    result = sinc * grad
    if rodrigues:
        ah = dagger(a)
        result = result + versine * (grad @ ah + ah @ grad)
        slope = slope + versine_slope * frobenius_inner(a @ a, grad)[..., None, None]
    else:
        trace = diagonal(grad).real.sum(-1)[..., None, None]
        slope = slope - (versine + theta2 * versine_slope) * trace
    return (result + slope * a).to(dtype)


def _rotation_blocks(c):
    """The 2×2 rotations by φ_j = c_j/√2 for ``c: [..., k]`` -> ``[..., k, 2, 2]``."""
    angle = c / math.sqrt(2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    return torch.stack([cos, sin, -sin, cos], dim=-1).unflatten(-1, (2, 2))


def _orthogonal_exp(a):
    """exp on so(m) for ``a: [..., m, m]``: the closed form for m = 2, 3, else the general one."""
    formula = {2: _exp_rotation, 3: _exp_rodrigues}.get(a.shape[-1])
    return expm(a) if formula is None else _closed_form(formula, a)


def _gather_matrix(values, index, n):
    """``values[..., index]`` as ``[..., n, n]`` (index on values' device)."""
    return values.index_select(-1, index).unflatten(-1, (n, n))


class Orthogonal(Group):
    """O(n); mirror of reference.groups.Orthogonal."""

    name = "O"

    def proj(self, m):
        return skew(m.real)

    def exp(self, a):
        """Closed forms for n = 2 (rotation) and n = 3 (Rodrigues); the general exponential otherwise."""
        return _orthogonal_exp(a)

    def _exp_saving(self, a):
        return (_orthogonal_exp(a), (a,)) if self.n in (2, 3) else super()._exp_saving(a)

    def _exp_vjp(self, saved, grad):
        return _closed_form_vjp(saved[0], grad, self.n == 3) if self.n in (2, 3) else super()._exp_vjp(saved, grad)

    def _haar(self, batch_shape, generator, dtype, device):
        return phase_fixed_qr(self._randn(batch_shape + (self.n, self.n), generator, dtype, device))

    def nearest(self, m):
        return polar(m.real)


class SpecialOrthogonal(Orthogonal):
    """SO(n); mirror of reference.groups.SpecialOrthogonal."""

    name = "SO"

    def _haar(self, batch_shape, generator, dtype, device):
        q = super()._haar(batch_shape, generator, dtype, device)
        sign = torch.sign(torch.linalg.det(q))
        return torch.cat([q[..., :, :1] * sign[..., None, None], q[..., :, 1:]], dim=-1)

    def _structure_violation(self, x, atol):
        return (torch.linalg.det(x) < 0).any()

    def _structure_failure(self, x, atol):
        if self._structure_violation(x, atol):
            return f"det(x) = {torch.linalg.det(x).min().item():.3g} < 0: x is in O(n) but not in SO(n)"
        return None

    def nearest(self, m):
        return special_polar(m.real)


class Unitary(Group):
    """U(n); mirror of reference.groups.Unitary."""

    name = "U"
    is_complex = True

    @property
    def dim(self):
        return self.n * self.n

    def _diagonal_coordinates(self, a):
        return diagonal(a).imag

    def hat(self, c):
        """Real part: the skew matrix of the ``re`` coordinates; imaginary part: the symmetric
        matrix of the ``im`` coordinates plus the diagonal (two gathers, as in ``Group.hat``)."""
        n, p = self.n, self.n * (self.n - 1) // 2
        diagonal, re, im = c[..., : c.shape[-1] - 2 * p], c[..., -2 * p:][..., :p], c[..., -p:]
        zero = c.new_zeros(*c.shape[:-1], 1)
        real = _gather_matrix(torch.cat([zero, re, -re], dim=-1) / math.sqrt(2), self._pair_index(True, c.device), n)
        imaginary = _gather_matrix(torch.cat([zero, im], dim=-1) / math.sqrt(2), self._pair_index(False, c.device), n)
        return torch.complex(real, imaginary + torch.diag_embed(self._diagonal_values(diagonal)))

    def _diagonal_values(self, c):
        """Imaginary parts of the diagonal from its coordinates (U: themselves)."""
        return c

    def vee(self, a):
        rows, cols = self._pairs(a.device)
        upper = math.sqrt(2) * a[..., rows, cols]
        return torch.cat([self._diagonal_coordinates(a), upper.real, upper.imag], dim=-1)

    def proj(self, m):
        return skew(m.to(_COMPLEX_OF.get(m.dtype, m.dtype)))

    def _haar(self, batch_shape, generator, dtype, device):
        return phase_fixed_qr(self._randn(batch_shape + (self.n, self.n), generator, dtype, device))

    def nearest(self, m):
        return polar(m.to(_COMPLEX_OF.get(m.dtype, m.dtype)))


class SpecialUnitary(Unitary):
    """SU(n); mirror of reference.groups.SpecialUnitary."""

    name = "SU"

    @property
    def dim(self):
        return self.n * self.n - 1

    def _helmert(self, like):
        dtype, device = like.real.dtype, like.device
        return self._cached(("helmert", dtype, device), lambda: sum_zero_basis(self.n, dtype=dtype, device=device))

    def _diagonal_coordinates(self, a):
        return super()._diagonal_coordinates(a) @ self._helmert(a)

    def _diagonal_values(self, c):
        return c @ self._helmert(c).T

    def exp(self, a):
        """Closed form for n = 2 (a² = −θ² I on su(2)); the general exponential otherwise."""
        return _closed_form(_exp_rotation, a) if self.n == 2 else expm(a)

    def _exp_saving(self, a):
        return (self.exp(a), (a,)) if self.n == 2 else super()._exp_saving(a)

    def _exp_vjp(self, saved, grad):
        return _closed_form_vjp(saved[0], grad, False) if self.n == 2 else super()._exp_vjp(saved, grad)

    def proj(self, m):
        s = super().proj(m)
        trace = diagonal(s).sum(-1)
        eye = torch.eye(self.n, dtype=s.dtype, device=s.device)
        return s - (trace / self.n)[..., None, None] * eye

    def _haar(self, batch_shape, generator, dtype, device):
        u = super()._haar(batch_shape, generator, dtype, device)
        return u / (torch.linalg.det(u) ** (1.0 / self.n))[..., None, None]

    def _determinant_error(self, x):
        return (torch.linalg.det(x) - 1.0).abs()

    def _structure_violation(self, x, atol):
        return self._determinant_error(x).amax() > atol

    def _structure_failure(self, x, atol):
        err = self._determinant_error(x).max().item()
        if err > atol:
            return f"det(x) is not 1: max |det(x) - 1| = {err:.3g} > atol = {atol:.3g}"
        return None

    def defect(self, x):
        return torch.maximum(self.distance(x), self._determinant_error(x))

    def _unit_determinant(self, x):
        phase = torch.linalg.det(x).angle()
        return x * torch.polar(torch.ones_like(phase), -phase / self.n)[..., None, None]

    def nearest(self, m):
        return special_unitary_polar(m.to(_COMPLEX_OF.get(m.dtype, m.dtype)))


class Torus(Group):
    """T = diagonal U(n); mirror of reference.groups.Torus."""

    name = "T"
    is_complex = True

    @property
    def dim(self):
        return self.n

    def hat(self, c):
        return torch.diag_embed(torch.complex(torch.zeros_like(c), c))

    def vee(self, a):
        return diagonal(a).imag

    def proj(self, m):
        return self.hat(self.vee(m.to(_COMPLEX_OF.get(m.dtype, m.dtype))))

    def _support(self):
        return torch.arange(self.n) * (self.n + 1)  # the diagonal

    def exp(self, a):
        return torch.diag_embed(torch.exp(diagonal(a)))

    def mul(self, x, y):
        """``x y`` by elementwise products, exact whenever one factor is diagonal (every use: the
        product of two elements, and the translations x·a, a·y of ambient matrices): (xy)_ij is
        x_ii y_ij when x is diagonal and x_ij y_jj when y is; the sum of the two minus their
        common diagonal x_ii y_ii is either."""
        dx, dy = diagonal(x), diagonal(y)
        return dx[..., :, None] * y + x * dy[..., None, :] - torch.diag_embed(dx * dy)

    def _haar(self, batch_shape, generator, dtype, device):
        real = _REAL_OF[dtype]
        theta = 2 * math.pi * torch.rand(batch_shape + (self.n,), generator=generator, dtype=real, device=device)
        return torch.diag_embed(torch.polar(torch.ones_like(theta), theta))

    def _structure_violation(self, x, atol):
        return (x - torch.diag_embed(diagonal(x))).abs().amax() > atol

    def _structure_failure(self, x, atol):
        err = (x - torch.diag_embed(diagonal(x))).abs().max().item()
        if err > atol:
            return f"not diagonal: max off-diagonal |x_ij| = {err:.3g} > atol = {atol:.3g}"
        return None

    def nearest(self, m):
        d = diagonal(m.to(_COMPLEX_OF.get(m.dtype, m.dtype)))
        magnitude = d.abs()
        phase = torch.where(magnitude == 0, 1.0, d / torch.where(magnitude == 0, 1.0, magnitude))  # NaN stays NaN
        return torch.diag_embed(phase)

    def pack(self, x):
        return diagonal(x)

    def unpack(self, p):
        return torch.diag_embed(p)

    def packed_exp(self, c):
        return torch.polar(torch.ones_like(c), c)

    def _packed_exp_saving(self, c):
        update = self.packed_exp(c)
        return update, (update,)

    def _packed_exp_vjp(self, saved, grad):
        """d e^{ic} = i e^{ic} dc, so ḡ_c = Re(conj(i e^{ic}) ḡ) = Im(conj(e^{ic}) ḡ)."""
        return (saved[0].conj() * grad).imag

    def packed_mul(self, p, q):
        return p * q

    def packed_features(self, p):
        return torch.cat([p.real, p.imag], dim=-1)

    def packed_settle(self, p):
        """``settle`` on the diagonal ``[..., n]``: refine's x(3I − xᴴx)/2 and the defect max|xᴴx − I|
        of a diagonal x, entry by entry."""
        moved = p
        for _ in range(SETTLE_STEPS):
            moved = 0.5 * (moved * (3 - moved.conj() * moved))
        return self._settle_where_far(p, moved, (p.conj() * p - 1).abs().amax(dim=-1))


class BlockOrthogonal(Group):
    """BO = block-diagonal O(b)^k; mirror of reference.groups.BlockOrthogonal."""

    name = "BO"

    def __init__(self, n, block=2):
        if isinstance(block, bool) or not isinstance(block, int):
            raise TypeError(f"block must be an int, got {type(block).__name__}")
        if block < 1:
            raise ValueError(f"block must be at least 1, got {block}")
        if isinstance(n, int) and not isinstance(n, bool) and n % block:
            raise ValueError(f"BO needs n divisible by the block size: n={n}, block={block}")
        super().__init__(n)
        self.block = block
        self._block_group = Orthogonal(block)  # the algebra of one block, in BO's coordinate order
        rows, cols = torch.triu_indices(block, block, 1)
        offsets = torch.arange(0, n, block).repeat_interleave(rows.numel())
        self._rows, self._cols = rows.repeat(n // block) + offsets, cols.repeat(n // block) + offsets
        self.mask = from_blocks(torch.ones(n // block, block, block))

    def __repr__(self):
        return f"BlockOrthogonal(n={self.n}, block={self.block})"

    @property
    def dim(self):
        return (self.n // self.block) * self.block * (self.block - 1) // 2

    def _support(self):
        b, n = self.block, self.n
        j, r, c = torch.meshgrid(torch.arange(n // b), torch.arange(b), torch.arange(b), indexing="ij")
        return ((j * b + r) * n + j * b + c).flatten()

    def proj(self, m):
        return skew(m.real) * self._mask(m.device, m.real.dtype)

    def exp(self, a):
        """On the [..., k, b, b] blocks, in closed form for b = 2, 3.

        ``mul`` stays the dense product: an exact product with one block-diagonal factor (the
        translations x·a, a·y of ambient matrices are part of the contract) done on blocks —
        rows X_j·y[block j] plus columns x[:, block j]·Y_j minus X_j Y_j — measured 5× slower
        than one batched n×n matmul at n = 70, b = 2 and 1.5× at n = 464 (1 thread, forward +
        backward, batch 32): small batched products and strided views cost more than the flops
        they save. Only a product that assumes both factors are elements (X_j Y_j alone) beats it,
        which a product of the n×n interface cannot assume.
        """
        return from_blocks(_orthogonal_exp(to_blocks(a, self.block)))

    def _haar(self, batch_shape, generator, dtype, device):
        k, b = self.n // self.block, self.block
        return from_blocks(phase_fixed_qr(self._randn(batch_shape + (k, b, b), generator, dtype, device)))

    def _mask(self, device, dtype):
        """``mask`` (1 on the blocks, 0 elsewhere: ``[n, n]``) as ``dtype`` on ``device``."""
        return self._cached(("mask", dtype, device), lambda: self.mask.to(device=device, dtype=dtype))

    def _off_blocks(self, x):
        return x * (1 - self._mask(x.device, x.dtype))

    def _structure_violation(self, x, atol):
        return self._off_blocks(x).abs().amax() > atol

    def _structure_failure(self, x, atol):
        err = self._off_blocks(x).abs().max().item()
        if err > atol:
            return f"not block-diagonal: max off-block |x_ij| = {err:.3g} > atol = {atol:.3g}"
        return None

    def nearest(self, m):
        return from_blocks(polar(to_blocks(m.real, self.block)))

    def pack(self, x):
        return to_blocks(x, self.block)

    def unpack(self, p):
        return from_blocks(p)

    def packed_exp(self, c):
        """Per block, from O(b)'s coordinates, in closed form for b = 2, 3 (no n×n matrix). For
        b = 2 block j is the rotation by φ = c_j/√2 (its generator has ±c_j/√2 off the diagonal),
        written straight from cos φ and sin φ, evaluated wider and rounded once like the other closed
        forms (``_closed_form``)."""
        if self.block == 2:
            return _closed_form(_rotation_blocks, c)
        blocks = c.unflatten(-1, (self.n // self.block, self._block_group.dim))
        return _orthogonal_exp(self._block_group.hat(blocks))

    def _packed_exp_saving(self, c):
        if self.block == 2:
            return self.packed_exp(c), (c,)
        blocks = c.unflatten(-1, (self.n // self.block, self._block_group.dim))
        return self._block_group._exp_saving(self._block_group.hat(blocks))

    def _packed_exp_vjp(self, saved, grad):
        """b = 2: block j is [[cos φ, sin φ], [−sin φ, cos φ]] with φ = c_j/√2, so
        ḡ_{c_j} = (cos φ (ḡ₀₁ − ḡ₁₀) − sin φ (ḡ₀₀ + ḡ₁₁)) / √2 (in float64, like the value); else
        O(b)'s VJP per block."""
        if self.block == 2:
            angle = saved[0].to(_WIDER.get(grad.dtype, grad.dtype)) / math.sqrt(2)
            wide = grad.to(angle.dtype)
            total = (torch.cos(angle) * (wide[..., 0, 1] - wide[..., 1, 0])
                     - torch.sin(angle) * (wide[..., 0, 0] + wide[..., 1, 1]))
            return (total / math.sqrt(2)).to(grad.dtype)
        return self._block_group._packed_exp_vjp(saved, grad).flatten(-2)

    def packed_mul(self, p, q):
        return p @ q

    def packed_features(self, p):
        return p.flatten(-3)

    def packed_settle(self, p):
        """``settle`` on the blocks ``[..., k, b, b]``: refine's x(3I − xᵀx)/2 and the defect
        max|xᵀx − I| of a block-diagonal x, block by block."""
        eye = torch.eye(self.block, dtype=p.dtype, device=p.device)
        moved = p
        for _ in range(SETTLE_STEPS):
            moved = 0.5 * (moved @ (3 * eye - moved.mT @ moved))
        return self._settle_where_far(p, moved, (p.mT @ p - eye).abs().amax(dim=(-3, -2, -1)))


class GeneralLinear(Group):
    """GL(n), the unconstrained ablation; mirror of reference.groups.GeneralLinear."""

    name = "GL"
    is_compact = False
    RANDOM_LOG_SPREAD = 0.25

    @property
    def dim(self):
        return self.n * self.n

    def hat(self, c):
        return c.unflatten(-1, (self.n, self.n))

    def vee(self, a):
        return a.real.flatten(-2)

    def proj(self, m):
        return m.real

    def inv(self, x):
        return torch.linalg.inv(x)

    def _haar(self, batch_shape, generator, dtype, device):
        shape = batch_shape + (self.n, self.n)
        left, right = (phase_fixed_qr(self._randn(shape, generator, dtype, device)) for _ in range(2))
        spread = torch.exp(self.RANDOM_LOG_SPREAD * self._randn(batch_shape + (1, self.n), generator, dtype, device))
        return (left * spread) @ right

    def _singular(self, s, atol):
        return (s[..., -1] <= atol * s[..., 0].clamp(min=1.0)).any()

    def _structure_violation(self, x, atol):
        return self._singular(torch.linalg.svdvals(x), atol)

    def _structure_failure(self, x, atol):
        s = torch.linalg.svdvals(x)
        if self._singular(s, atol):
            return f"singular: smallest singular value {s[..., -1].min().item():.3g} <= atol·max(1, σ_max)"
        return None

    def nearest(self, m):
        return m.real.clone()


GROUPS = {cls.name: cls for cls in
          (Orthogonal, SpecialOrthogonal, Unitary, SpecialUnitary, Torus, BlockOrthogonal, GeneralLinear)}


def get_group(name, n, block=None):
    """Mirror of reference.groups.get_group."""
    arguments = group_arguments(name, GROUPS, block)  # refuses an unknown name before it is looked up
    return GROUPS[name](n, *arguments)
