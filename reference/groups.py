"""The group zoo: closed subgroups of U(n) (plus GL(n) as the unconstrained ablation).

Elements are n×n matrices ``x: [..., n, n]`` with leading batch axes; Lie-algebra elements
``a: [..., n, n]`` live in the same space; coordinates ``c: [..., dim]`` are taken in an
orthonormal basis {B_k} of g for the inner product ``<a, b> = Re tr(a^H b)``:

    hat(c) = Σ_k c_k B_k,        vee(a)_k = <B_k, a>,        vee(hat(c)) = c.

Coordinate order (the torch tree uses the same order):
    O, SO   pairs i < j row-major, B = (E_ij − E_ji)/√2
    U       diagonal i·E_kk (k = 0..n-1), then the pairs' real parts (E_ij − E_ji)/√2,
            then the pairs' imaginary parts i(E_ij + E_ji)/√2
    SU      as U, with the diagonal replaced by i·diag(h) for the Helmert basis h of Σd = 0
    T       i·E_kk
    BO      block by block, within a block as O(b)
    GL      E_ij row-major

Features (docs/design.md, Models): ``features(x)`` stacks the real and, on the complex groups, imaginary parts
of the entries of x that the group allows to be non-zero (its support), row-major:

    dense groups (O, SO, U, SU, GL)   all n² entries          num_features n² (2n² complex)
    T                                 the n diagonal entries   num_features 2n
    BO                                the k·b² block entries,  num_features k·b² = n·b
                                      block by block

On the group, <x, y> = features(x) · features(y) (the entries off the support are zero).

Packed form: ``pack(x)`` keeps only the support, in the group's own layout, and ``unpack`` puts it
back; ``packed_exp(c) = pack(exp(hat(c)))``, ``packed_mul(p, q) = pack(mul(unpack p, unpack q))``
for elements and ``packed_features(p) = features(unpack p)`` never form an n×n matrix:

    dense groups   the n×n matrix itself           [..., n, n]
    T              the diagonal e^{iθ}             [..., n]        exp and product elementwise
    BO             the blocks                      [..., k, b, b]  exp and product per block

A recurrence can run on packed states (O(n) per torus state, O(n·b) per BO state) and unpack
only the states it returns.

For the compact groups ``inv(x) = x^H`` and the inner product is bi-invariant, so
``proj_tangent(x, u) = x Π(x^H u)`` is the Riemannian gradient of an ambient gradient u and
``retr(x, u) = x exp(Π(x^H u))`` is the Riemannian exponential map. GL(n) is not compact and
not a subgroup of U(n); there ``inv`` is the true inverse and Π the identity.

Mirror: ``manifold_impl/groups.py`` (torch), same classes, names and signatures.
"""

from __future__ import annotations

from functools import cached_property

import autograd.numpy as anp
import numpy as np

from reference.checks import group_arguments
from reference.linalg import (
    dagger, default_atol, diagonal, expm, frobenius_inner, from_blocks, phase_fixed_qr, polar, skew,
    special_polar, special_unitary_polar, sum_zero_basis, to_blocks,
)

SETTLE_STEPS = 3  # Newton steps of ``Group.settle``: a defect δ ≤ 0.1 ends at the rounding level


def _check_device(device):
    if device not in (None, "cpu"):
        raise ValueError(f"the NumPy reference runs on the CPU only; got device={device!r}")


def _check_batch_shape(batch_shape):
    batch_shape = tuple(batch_shape)
    if not all(isinstance(s, (int, np.integer)) and s >= 0 for s in batch_shape):
        raise ValueError(f"batch_shape must be a tuple of non-negative ints, got {batch_shape!r}")
    return batch_shape


def _unit(n, i, j):
    e = np.zeros((n, n))
    e[i, j] = 1.0
    return e


def _skew_pairs(n, offset=0, size=None):
    """(E_ij − E_ji)/√2 for the pairs i < j of one diagonal block [offset, offset + size)."""
    size = n if size is None else size
    rows, cols = np.triu_indices(size, 1)
    return [(_unit(n, offset + i, offset + j) - _unit(n, offset + j, offset + i)) / np.sqrt(2)
            for i, j in zip(rows, cols)]


def _hermitian_pairs(n):
    """i(E_ij + E_ji)/√2 for the pairs i < j."""
    rows, cols = np.triu_indices(n, 1)
    return [1j * (_unit(n, i, j) + _unit(n, j, i)) / np.sqrt(2) for i, j in zip(rows, cols)]


def _stack_basis(matrices, n, complex_):
    dtype = np.complex128 if complex_ else np.float64
    if not matrices:
        return np.zeros((0, n, n), dtype=dtype)
    return np.stack(matrices).astype(dtype)


class Group:
    """A closed matrix group of n×n matrices; subclasses fix the algebra, sampling and projection.

    Args:
        n: matrix size, n ≥ 1.
    """

    name = ""
    is_complex = False
    is_compact = True

    def __init__(self, n):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"n must be an int, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        self.n = int(n)

    def __repr__(self):
        return f"{type(self).__name__}(n={self.n})"

    @cached_property
    def basis(self):
        """``[dim, n, n]``, orthonormal for Re tr(a^H b); built on first use (dim·n² numbers)."""
        return self._make_basis()

    @property
    def dim(self):
        """Real dimension of the Lie algebra g (docs/design.md, Groups)."""
        raise NotImplementedError

    def _support(self):
        """Row-major positions ``[s]`` in the flattened n×n matrix of the entries the group allows to
        be non-zero, or None for all n² of them."""
        return None

    @property
    def num_features(self):
        """Length of ``features(x)``: the support's size, twice that on the complex groups."""
        support = self._support()
        size = self.n * self.n if support is None else len(support)
        return size * (2 if self.is_complex else 1)

    def features(self, x):
        """Real coordinates of ``x`` on the group's support (module docstring).

        ``x: [..., n, n] -> [..., num_features]``: the real parts of the supported entries, then
        (complex groups) their imaginary parts. On the dense groups this is ``realvec(x)``.
        """
        flat = anp.reshape(x, x.shape[:-2] + (-1,))
        support = self._support()
        if support is not None:
            flat = flat[..., support]
        if self.is_complex:
            return anp.concatenate([anp.real(flat), anp.imag(flat)], axis=-1)
        return anp.real(flat)

    def element_dtype(self, dtype=None):
        """NumPy dtype of group elements for a real working precision ``dtype`` (default float64)."""
        real = np.dtype(np.float64 if dtype is None else dtype)
        if real.kind == "c":
            real = np.dtype(np.finfo(real).dtype)
        if real not in (np.float32, np.float64):
            raise TypeError(f"dtype must be float32 or float64 (or complex64/128), got {real}")
        return np.result_type(real, np.complex64) if self.is_complex else real

    def _make_basis(self):
        raise NotImplementedError

    # ---- the Lie algebra ------------------------------------------------------------------
    def proj(self, m):
        """Orthogonal projection Π of an ambient matrix onto g. ``m: [..., n, n]``."""
        raise NotImplementedError

    def hat(self, c):
        """Algebra element Σ_k c_k B_k of coordinates ``c: [..., dim] -> [..., n, n]``."""
        return anp.tensordot(c, self.basis, axes=([-1], [0]))

    def vee(self, a):
        """Coordinates <B_k, a> of an algebra element ``a: [..., n, n] -> [..., dim]``."""
        return anp.real(anp.einsum("kij,...ij->...k", anp.conj(self.basis), a))

    def exp(self, a):
        """Group exponential of ``a ∈ g``: the matrix exponential, ``[..., n, n]``."""
        return expm(a)

    def random_algebra(self, batch_shape=(), *, generator, scale=1.0, dtype=None, device=None):
        """hat(scale · c) with standard normal coordinates c, drawn from ``generator``."""
        _check_device(device)
        batch_shape = _check_batch_shape(batch_shape)
        c = scale * generator.standard_normal(batch_shape + (self.dim,))
        return self.hat(c).astype(self.element_dtype(dtype))

    # ---- the group ------------------------------------------------------------------------
    def mul(self, x, y):
        """Group product ``x y``."""
        return anp.matmul(x, y)

    def inv(self, x):
        """``x^H``; the inverse on the compact groups."""
        return dagger(x)

    def inner(self, a, b):
        """``Re tr(a^H b)`` over the last two axes ``[..., n, n] -> [...]``."""
        return frobenius_inner(a, b)

    def identity(self, batch_shape=(), dtype=None, device=None):
        """Identity matrices ``[*batch_shape, n, n]``."""
        _check_device(device)
        batch_shape = _check_batch_shape(batch_shape)
        eye = np.eye(self.n, dtype=self.element_dtype(dtype))
        return np.broadcast_to(eye, batch_shape + (self.n, self.n)).copy()

    def random(self, batch_shape=(), *, generator, dtype=None, device=None):
        """Haar-distributed elements ``[*batch_shape, n, n]`` drawn from ``generator``."""
        _check_device(device)
        batch_shape = _check_batch_shape(batch_shape)
        return self._haar(batch_shape, generator).astype(self.element_dtype(dtype))

    def _haar(self, batch_shape, generator):
        raise NotImplementedError

    def distance(self, x):
        """Departure from unitarity, max |x^H x − I| per matrix: ``[..., n, n] -> [...]``.

        0 on the group; for a compact group and x near it, about twice the Frobenius distance's
        largest entry (x = u(I + e) with u on the group and e Hermitian gives x^H x − I ≈ 2e).
        It does not see the structure (off-diagonal entries of a torus element, the determinant
        of SO/SU: ``is_member`` checks those). GL is open and dense among the n×n matrices, so
        the distance to it is 0.
        """
        x = np.asarray(x)
        if not self.is_compact:
            return np.zeros(x.shape[:-2])
        return np.max(np.abs(dagger(x) @ x - np.eye(self.n)), axis=(-2, -1), initial=0.0)

    def is_member(self, x, atol=None, explain=False):
        """Whether ``x`` lies on the group within ``atol`` (default 100·n·eps of its dtype).

        Returns a bool, or ``(ok, reason)`` with a readable reason on failure when ``explain``.
        """
        reason = self._membership_failure(np.asarray(x), atol)
        return (reason is None, reason) if explain else reason is None

    def _membership_failure(self, x, atol):
        n = self.n
        if x.ndim < 2 or x.shape[-2:] != (n, n):
            return f"expected shape [..., {n}, {n}], got {tuple(x.shape)}"
        if x.dtype.kind not in "fc":
            return f"expected a floating dtype, got {x.dtype}"
        if x.dtype.kind == "c" and not self.is_complex:
            return f"{self.name}({n}) is a real group but the matrix is complex ({x.dtype})"
        if not np.all(np.isfinite(x)):
            return "the matrix has non-finite entries"
        atol = default_atol(x.real.dtype, n) if atol is None else atol
        if self.is_compact:
            err = np.max(self.distance(x), initial=0.0)
            if err > atol:
                return f"not unitary: max |x^H x - I| = {err:.3g} > atol = {atol:.3g}"
        return self._structure_failure(x, atol)

    def _structure_failure(self, x, atol):
        return None

    # ---- the manifold ---------------------------------------------------------------------
    def proj_tangent(self, x, u):
        """Riemannian gradient / tangent projection ``x Π(x^{-1} u)`` of an ambient ``u`` at ``x``."""
        return self.mul(x, self.proj(self.mul(self.inv(x), u)))

    def retr(self, x, u):
        """``x exp(Π(x^{-1} u))``: the exponential map of the bi-invariant metric."""
        return self.mul(x, self.exp(self.proj(self.mul(self.inv(x), u))))

    def nearest(self, m):
        """Closest group element to an ambient matrix (used to re-project drifted states)."""
        raise NotImplementedError

    # ---- the packed form (module docstring) -----------------------------------------------
    def pack(self, x):
        """The entries of ``x: [..., n, n]`` on the support, in the group's layout (dense: x)."""
        return x

    def unpack(self, p):
        """The n×n matrix of a packed ``p`` (zero off the support)."""
        return p

    def packed_exp(self, c):
        """``pack(exp(hat(c)))`` of coordinates ``c: [..., dim]``."""
        return self.exp(self.hat(c))

    def packed_mul(self, p, q):
        """``pack(unpack(p) · unpack(q))`` for packed elements p, q."""
        return self.mul(p, q)

    def packed_features(self, p):
        """``features(unpack(p))``: ``[..., num_features]``."""
        return self.features(p)

    def refine(self, x):
        """One Newton step of the polar iteration, x (3I − x^H x) / 2: the identity on the group,
        and for x within δ of it (‖x^H x − I‖ = δ) a point within O(δ²). Removes the rounding
        drift of repeated products in low precision at the cost of two matrix products."""
        if not self.is_compact:
            return x
        return 0.5 * self.mul(x, 3 * anp.eye(self.n) - self.mul(self.inv(x), x))

    def defect(self, x):
        """What ``is_member`` holds against its tolerance, per matrix: ``[..., n, n] -> [...]``;
        ``distance``, and on SU also |det(x) − 1|."""
        return self.distance(x)

    def settle(self, x):
        """``x: [..., n, n]`` with each matrix whose ``defect`` exceeds half the membership tolerance
        (100·n·eps / 2) moved back onto the group; the others unchanged, bit for bit.

        The move is ``SETTLE_STEPS`` steps of ``refine`` (x = u(I + e) with e Hermitian becomes
        u(I − 3e²/2 + O(e³)), so a defect δ becomes about 3δ²/4 per step: δ ≤ 0.1 ends at the
        rounding level), then ``_unit_determinant``. Products, a determinant and an elementwise
        choice only: no SVD, nothing read back. It is what a layer returns as its state, so that a
        state drifted by the rounding of thousands of steps is still accepted when passed back.
        """
        if not self.is_compact:
            return x
        x = np.asarray(x)
        moved = x
        for _ in range(SETTLE_STEPS):
            moved = self.refine(moved)
        far = self.defect(x) > default_atol(x.real.dtype, self.n) / 2
        return np.where(far[..., None, None], self._unit_determinant(moved), x).astype(x.dtype)

    def _unit_determinant(self, x):
        """x itself; SU: x divided by the n-th root of its determinant's phase (for x unitary, so
        that det = 1 to rounding)."""
        return x

    def packed_settle(self, p):
        """``settle`` on the packed form ``p: [..., *packed]`` (``pack``): pack(settle(unpack(p)))."""
        return self.pack(self.settle(self.unpack(p)))


class Orthogonal(Group):
    """O(n): real x with x^T x = I; g = real skew-symmetric matrices, Π(m) = (Re m − Re mᵀ)/2."""

    name = "O"

    @property
    def dim(self):
        return self.n * (self.n - 1) // 2

    def _make_basis(self):
        return _stack_basis(_skew_pairs(self.n), self.n, False)

    def proj(self, m):
        return skew(anp.real(m))

    def _haar(self, batch_shape, generator):
        return phase_fixed_qr(generator.standard_normal(batch_shape + (self.n, self.n)))

    def nearest(self, m):
        return polar(np.real(m))


class SpecialOrthogonal(Orthogonal):
    """SO(n): O(n) with det = +1. Same algebra as O(n)."""

    name = "SO"

    def _haar(self, batch_shape, generator):
        q = super()._haar(batch_shape, generator)
        flip = np.linalg.det(q) < 0
        q[..., :, 0] *= np.where(flip, -1.0, 1.0)[..., None]  # q·diag(-1, 1, ..) maps O⁻ onto SO
        return q

    def _structure_failure(self, x, atol):
        det = np.linalg.det(x)
        if np.any(det < 0):
            return f"det(x) = {np.min(det):.3g} < 0: x is in O(n) but not in SO(n)"
        return None

    def nearest(self, m):
        return special_polar(np.real(m))


class Unitary(Group):
    """U(n): complex x with x^H x = I; g = skew-Hermitian matrices, Π(m) = (m − m^H)/2."""

    name = "U"
    is_complex = True

    @property
    def dim(self):
        return self.n * self.n

    def _make_basis(self):
        n = self.n
        diagonal = [1j * _unit(n, k, k) for k in range(n)]
        return _stack_basis(diagonal + _skew_pairs(n) + _hermitian_pairs(n), n, True)

    def proj(self, m):
        return skew(m + 0j)

    def _haar(self, batch_shape, generator):
        shape = batch_shape + (self.n, self.n)
        g = (generator.standard_normal(shape) + 1j * generator.standard_normal(shape)) / np.sqrt(2)
        return phase_fixed_qr(g)

    def nearest(self, m):
        return polar(m + 0j)


class SpecialUnitary(Unitary):
    """SU(n): U(n) with det = 1; g = traceless skew-Hermitian, Π(m) = (m − m^H)/2 − tr(·)/n I."""

    name = "SU"

    @property
    def dim(self):
        return self.n * self.n - 1

    def _make_basis(self):
        n = self.n
        h = sum_zero_basis(n)
        diagonal = [1j * np.diag(h[:, k]) for k in range(n - 1)]
        return _stack_basis(diagonal + _skew_pairs(n) + _hermitian_pairs(n), n, True)

    def proj(self, m):
        s = skew(m + 0j)
        trace = anp.sum(diagonal(s), axis=-1)
        return s - (trace / self.n)[..., None, None] * anp.eye(self.n)

    def _haar(self, batch_shape, generator):
        u = super()._haar(batch_shape, generator)
        return u / (np.linalg.det(u) ** (1.0 / self.n))[..., None, None]

    def _structure_failure(self, x, atol):
        err = np.max(np.abs(np.linalg.det(x) - 1.0), initial=0.0)
        if err > atol:
            return f"det(x) is not 1: max |det(x) - 1| = {err:.3g} > atol = {atol:.3g}"
        return None

    def defect(self, x):
        return np.maximum(self.distance(x), np.abs(np.linalg.det(x) - 1.0))

    def _unit_determinant(self, x):
        phase = np.angle(np.linalg.det(x))
        return x * np.exp(-1j * phase / self.n)[..., None, None]

    def nearest(self, m):
        """The closest SU(n) element: W diag(e^{iθ}) V^H for m = W diag(σ) V^H, with the phases θ
        (Σθ ≡ −arg det(W V^H)) that maximize Σ σ_j cos θ_j (``special_unitary_polar``). Dividing the
        polar factor by an n-th root of its determinant (one uniform phase) agrees with it only to
        second order in the distance from the group, and can be far off away from it."""
        return special_unitary_polar(m + 0j)


class Torus(Group):
    """T: diagonal unitary matrices diag(e^{iθ}); g = i·diag(ℝⁿ), Π(m) = i·Im(diag m)."""

    name = "T"
    is_complex = True

    @property
    def dim(self):
        return self.n

    def _support(self):
        return np.arange(self.n) * (self.n + 1)  # the diagonal

    def _make_basis(self):
        return _stack_basis([1j * _unit(self.n, k, k) for k in range(self.n)], self.n, True)

    def _diag(self, d):
        """diag(d): ``[..., n] -> [..., n, n]``."""
        return d[..., None, :] * anp.eye(self.n)

    def proj(self, m):
        return self._diag(1j * anp.imag(diagonal(m)))

    def exp(self, a):
        """Closed form: exp(i·diag(θ)) = diag(e^{iθ})."""
        return self._diag(anp.exp(diagonal(a)))

    def _haar(self, batch_shape, generator):
        theta = generator.uniform(0.0, 2 * np.pi, batch_shape + (self.n,))
        return self._diag(np.exp(1j * theta))

    def _structure_failure(self, x, atol):
        err = np.max(np.abs(x - self._diag(diagonal(x))), initial=0.0)
        if err > atol:
            return f"not diagonal: max off-diagonal |x_ij| = {err:.3g} > atol = {atol:.3g}"
        return None

    def nearest(self, m):
        d = diagonal(np.asarray(m) + 0j)
        magnitude = np.abs(d)
        phase = np.where(magnitude == 0, 1.0, d / np.where(magnitude == 0, 1.0, magnitude))  # NaN stays NaN
        return self._diag(phase)

    def pack(self, x):
        """The diagonal ``[..., n]``."""
        return diagonal(x)

    def unpack(self, p):
        return self._diag(p)

    def packed_exp(self, c):
        """e^{i c}, elementwise."""
        return anp.exp(1j * c)

    def packed_mul(self, p, q):
        return p * q

    def packed_features(self, p):
        return anp.concatenate([anp.real(p), anp.imag(p)], axis=-1)


class BlockOrthogonal(Group):
    """BO: block-diagonal O(b)^k with n = k·b; g = block-diagonal skew matrices.

    Args:
        n: matrix size, a multiple of ``block``.
        block: block size b ≥ 1.
    """

    name = "BO"

    def __init__(self, n, block=2):
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
            raise TypeError(f"block must be an int, got {type(block).__name__}")
        if block < 1:
            raise ValueError(f"block must be at least 1, got {block}")
        if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n % block:
            raise ValueError(f"BO needs n divisible by the block size: n={n}, block={block}")
        self.block = int(block)
        super().__init__(n)
        self._block_group = Orthogonal(self.block)  # the algebra of one block, in BO's coordinate order

    @cached_property
    def mask(self):
        """``[n, n]``: 1 on the diagonal blocks, 0 off them."""
        return from_blocks(np.ones((self.n // self.block, self.block, self.block)))

    def __repr__(self):
        return f"BlockOrthogonal(n={self.n}, block={self.block})"

    @property
    def dim(self):
        return (self.n // self.block) * self.block * (self.block - 1) // 2

    def _support(self):
        """Block j's entry (r, c) sits at row j·b + r, column j·b + c."""
        b, n = self.block, self.n
        j, r, c = np.meshgrid(np.arange(n // b), np.arange(b), np.arange(b), indexing="ij")
        return ((j * b + r) * n + j * b + c).ravel()

    def _make_basis(self):
        b = self.block
        matrices = []
        for j in range(self.n // b):
            matrices += _skew_pairs(self.n, offset=j * b, size=b)
        return _stack_basis(matrices, self.n, False)

    def proj(self, m):
        return skew(anp.real(m)) * self.mask

    def _haar(self, batch_shape, generator):
        k, b = self.n // self.block, self.block
        return from_blocks(phase_fixed_qr(generator.standard_normal(batch_shape + (k, b, b))))

    def _structure_failure(self, x, atol):
        err = np.max(np.abs(x * (1 - self.mask)), initial=0.0)
        if err > atol:
            return f"not block-diagonal: max off-block |x_ij| = {err:.3g} > atol = {atol:.3g}"
        return None

    def nearest(self, m):
        return from_blocks(polar(to_blocks(np.real(m), self.block)))

    def pack(self, x):
        """The diagonal blocks ``[..., k, b, b]`` (a gather of the support: differentiable)."""
        b = self.block
        flat = anp.reshape(x, x.shape[:-2] + (-1,))[..., self._support()]
        return anp.reshape(flat, x.shape[:-2] + (self.n // b, b, b))

    def unpack(self, p):
        """Block-diagonal matrix of the blocks: out[j·b + r, l·b + c] = p[j, r, c] δ_jl."""
        k, b = p.shape[-3], p.shape[-1]
        spread = anp.einsum("...jrc,jl->...jrlc", p, np.eye(k))
        return anp.reshape(spread, p.shape[:-3] + (k * b, k * b))

    def packed_exp(self, c):
        """exp per block: block j's coordinates, in O(b)'s order, exponentiated as b×b matrices."""
        shape = c.shape[:-1] + (self.n // self.block, self._block_group.dim)
        return expm(self._block_group.hat(anp.reshape(c, shape)))  # [..., k, b, b]

    def packed_mul(self, p, q):
        return anp.matmul(p, q)

    def packed_features(self, p):
        return anp.reshape(p, p.shape[:-3] + (-1,))


class GeneralLinear(Group):
    """GL(n), the unconstrained ablation: any invertible real matrix; g = all real n×n, Π = Re.

    Not compact, not a subgroup of U(n): ``inv`` is the true inverse and the inner product is
    not bi-invariant. GL has no Haar probability; ``random`` draws well-conditioned matrices
    q₁ diag(e^{σ z}) q₂ with Haar q₁, q₂ ∈ O(n), z ~ N(0, I) and σ = RANDOM_LOG_SPREAD.
    """

    RANDOM_LOG_SPREAD = 0.25

    name = "GL"
    is_compact = False

    @property
    def dim(self):
        return self.n * self.n

    def _make_basis(self):
        n = self.n
        return _stack_basis([_unit(n, i, j) for i in range(n) for j in range(n)], n, False)

    def proj(self, m):
        return anp.real(m)

    def inv(self, x):
        return anp.linalg.inv(x)

    def _haar(self, batch_shape, generator):
        left, right = (phase_fixed_qr(generator.standard_normal(batch_shape + (self.n, self.n)))
                       for _ in range(2))
        spread = np.exp(self.RANDOM_LOG_SPREAD * generator.standard_normal(batch_shape + (1, self.n)))
        return (left * spread) @ right

    def _structure_failure(self, x, atol):
        s = np.linalg.svd(x, compute_uv=False)
        if np.any(s[..., -1] <= atol * np.maximum(1.0, s[..., 0])):
            return f"singular: smallest singular value {np.min(s[..., -1]):.3g} <= atol·max(1, σ_max)"
        return None

    def nearest(self, m):
        return np.array(np.real(m))


GROUPS = {cls.name: cls for cls in
          (Orthogonal, SpecialOrthogonal, Unitary, SpecialUnitary, Torus, BlockOrthogonal, GeneralLinear)}


def get_group(name, n, block=None):
    """The group called ``name`` (one of GROUPS) of n×n matrices; ``block`` only for BO (default 2;
    ``reference.checks.group_arguments``)."""
    arguments = group_arguments(name, GROUPS, block)  # refuses an unknown name before it is looked up
    return GROUPS[name](n, *arguments)
