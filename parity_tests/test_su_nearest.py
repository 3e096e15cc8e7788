"""SU.nearest is the closest SU(n) element in Frobenius norm (docs/design.md, Groups), in both trees: checked
against brute-force searches that do not use the implementation's solver."""

import functools

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import scipy.stats

from parity_tests.backends import BACKENDS

from parity_tests.tolerances import group_atol

SIZES = (2, 3, 4, 5)
FAR_MATRICES = 6  # Gaussian complex matrices per size, far from the group (‖m − SU(n)‖ = O(n))


def gaussian(seed, shape):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def distance(x, m):
    return np.linalg.norm(x - m, axis=(-2, -1))


def nearest(backend, n, m):
    return backend.numpy(backend.group("SU", n).nearest(backend.array(m)))


def assert_special_unitary(x, tol):
    n = x.shape[-1]
    assert np.max(np.abs(np.conj(np.swapaxes(x, -1, -2)) @ x - np.eye(n))) <= tol
    assert np.max(np.abs(np.linalg.det(x) - 1.0)) <= tol


def phase_search(m, restarts=40, seed=0):
    """Smallest ‖X − m‖ over X = W diag(e^{iθ}) V^H ∈ SU(n) (m = W Σ V^H): BFGS over the n − 1 free
    phases (the last one closes Σθ ≡ −arg det(W V^H)) from ``restarts`` uniform random starts."""
    w, s, vh = np.linalg.svd(m)
    target = -np.angle(np.linalg.det(w @ vh))

    def objective(free):  # −Σ σ_j cos θ_j and its gradient
        theta = np.append(free, target - free.sum())
        return -np.sum(s * np.cos(theta)), s[:-1] * np.sin(theta[:-1]) - s[-1] * np.sin(theta[-1])

    rng = np.random.default_rng(seed)
    best = max(-scipy.optimize.minimize(objective, rng.uniform(-np.pi, np.pi, m.shape[-1] - 1), jac=True,
                                        method="BFGS").fun for _ in range(restarts))
    return np.sqrt(max(np.sum(np.abs(m) ** 2) + m.shape[-1] - 2 * best, 0.0))


def group_search(m, restarts=12, seed=0):
    """Smallest ‖X − m‖ over all of SU(n), without the SVD reduction: Nelder–Mead then BFGS on
    X = x₀ expm(A(c)), A(c) traceless skew-Hermitian, from Haar-random x₀ (scipy's unitary_group)."""
    n = m.shape[-1]

    def algebra(c):
        z = (c[: n * n] + 1j * c[n * n:]).reshape(n, n)
        a = (z - z.conj().T) / 2
        return a - np.trace(a) / n * np.eye(n)

    best = np.inf
    for k in range(restarts):
        u = scipy.stats.unitary_group.rvs(n, random_state=seed + k)
        x0 = u / np.linalg.det(u) ** (1.0 / n)

        def objective(c, x0=x0):
            return np.sum(np.abs(x0 @ scipy.linalg.expm(algebra(c)) - m) ** 2)

        start = scipy.optimize.minimize(objective, np.zeros(2 * n * n), method="Nelder-Mead",
                                        options={"maxiter": 400}).x
        best = min(best, scipy.optimize.minimize(objective, start, method="BFGS", options={"gtol": 1e-10}).fun)
    return np.sqrt(best)


@functools.cache
def far_case(n):
    """(matrices, their brute-force smallest distances) for size n, computed once for all backends."""
    m = gaussian(100 + n, (FAR_MATRICES, n, n))
    return m, np.array([phase_search(one) for one in m])


@pytest.mark.parametrize("n", SIZES)
def test_nearest_is_no_farther_than_a_phase_search(backend, n, atol):
    m, best = far_case(n)
    x = nearest(backend, n, m)
    assert_special_unitary(x, group_atol(backend.dtype, n))
    excess = distance(x, m) - best
    assert np.all(excess <= 10 * atol * n), f"up to {excess.max():.3g} farther than the phase search"


@functools.cache
def whole_group_case(n):
    m = gaussian(200 + n, (3, n, n))
    return m, np.array([group_search(one) for one in m])


@pytest.mark.parametrize("n", (2, 3))
def test_nearest_is_no_farther_than_a_search_over_the_whole_group(backend, n, atol):
    m, best = whole_group_case(n)
    x = nearest(backend, n, m)
    assert np.all(distance(x, m) <= best + 1e-6 + 10 * atol * n)


def test_nearest_of_the_issue_example_beats_the_identity(backend, atol):
    """m = diag(2, 0.1 e^{0.9πi}): the identity is at 1.4833, the uniform-phase correction at 2.31;
    a dense scan over the one free phase of SU(2)'s diagonal-in-the-SVD-basis elements gives 1.4831."""
    m = np.diag([2.0, 0.1 * np.exp(0.9j * np.pi)])
    x = nearest(backend, 2, m)
    assert_special_unitary(x, group_atol(backend.dtype, 2))
    scan = np.linspace(-np.pi, np.pi, 2_000_001)  # X = diag(e^{iθ}, e^{−iθ}) (m is diagonal)
    scanned = np.sqrt(np.min(np.abs(np.exp(1j * scan) - 2.0) ** 2 + np.abs(np.exp(-1j * scan) - m[1, 1]) ** 2))
    assert distance(x, m) <= scanned + 10 * atol
    assert distance(x, m) < distance(np.eye(2), m) - 1e-4


@pytest.mark.parametrize("case", ["repeated", "zero", "rank-one", "real"])
def test_nearest_of_degenerate_matrices(backend, case, atol):
    n = 3
    m = {"repeated": 0.7 * np.exp(2.5j) * np.eye(n),  # σ all equal, det phase far from 0
         "zero": np.zeros((n, n), complex),
         "rank-one": np.outer(gaussian(1, n), gaussian(2, n)),
         "real": gaussian(3, (n, n)).real}[case]
    x = nearest(backend, n, m)
    assert_special_unitary(x, group_atol(backend.dtype, n))
    assert distance(x, m) <= phase_search(m + 0j) + 10 * atol * n


@pytest.mark.parametrize("batch_shape", [(), (1,), (2, 3)], ids=["b()", "b(1,)", "b(2,3)"])
def test_nearest_batched(backend, batch_shape, atol):
    n = 4
    m = gaussian(5, batch_shape + (n, n))
    x = nearest(backend, n, m)
    assert x.shape == m.shape
    assert_special_unitary(x, group_atol(backend.dtype, n))
    for i in np.ndindex(batch_shape):
        assert np.max(np.abs(nearest(backend, n, m[i]) - x[i])) <= group_atol(backend.dtype, n)


@pytest.mark.parametrize("n", SIZES)
def test_near_the_group_the_uniform_phase_correction_agrees_to_second_order(n):
    """For m = x + εE (x ∈ SU(n)), the polar factor divided by the principal n-th root of its
    determinant (the previous SU.nearest, recomputed with scipy) is within O(ε²) of the closest
    element; both trees in float64."""
    rng = np.random.default_rng(n)
    u = scipy.stats.unitary_group.rvs(n, random_state=n)
    x = u / np.linalg.det(u) ** (1.0 / n)
    e = gaussian(7, (n, n))
    e /= np.linalg.norm(e)
    e *= np.exp(1j * rng.uniform(0, 2 * np.pi)) / np.linalg.norm(e)
    for backend in (b for b in BACKENDS if b.dtype == "float64"):
        gaps = []
        for eps in (1e-2, 1e-3):
            polar = scipy.linalg.polar(x + eps * e)[0]
            uniform = polar / np.linalg.det(polar) ** (1.0 / n)
            gaps.append(np.linalg.norm(nearest(backend, n, x + eps * e) - uniform))
        assert gaps[0] <= 2.0 * 1e-2 ** 2, backend  # O(ε²), not O(ε)
        assert 30 < gaps[0] / gaps[1] < 300, backend  # shrinks like ε² (100×), not like ε (10×)
