"""The group contract (docs/design.md, Groups), run against both trees and checked against independent math."""

import numpy as np
import pytest
import scipy.linalg
import torch

from manifold_impl.groups import get_group as get_torch_group
from parity_tests.conftest import BATCH_IDS, BATCH_SHAPES
from parity_tests.oracles import algebra_violation, group_violation, state_features, taylor_expm, unitarity_defect
from parity_tests.tolerances import EXPM_ORACLE_RTOL, HAAR_MOMENT_ATOL, group_atol
from reference.groups import GROUPS as REFERENCE_GROUPS

batch_shapes = pytest.mark.parametrize("batch_shape", BATCH_SHAPES, ids=BATCH_IDS)


@pytest.fixture
def group(backend, group_case):
    """The group of ``group_case`` in the backend's tree."""
    return backend.group(*group_case)


@pytest.fixture
def tol(backend, group):
    """Tolerance of composite group operations for this group's n and the backend's dtype."""
    return group_atol(backend.dtype, group.n)


def ambient(seed, shape, complex_):
    """Random ambient matrices (NumPy), complex when asked."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal(shape)
    return m + 1j * rng.standard_normal(shape) if complex_ else m


def sample(backend, group, batch_shape, seed=0):
    return group.random(batch_shape, generator=backend.generator(seed), dtype=backend.real_dtype())


def sample_algebra(backend, group, batch_shape, seed=1, scale=1.0):
    return group.random_algebra(batch_shape, generator=backend.generator(seed), scale=scale,
                                dtype=backend.real_dtype())


def close(actual, expected, atol):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    err = np.max(np.abs(actual - expected), initial=0.0)
    assert err <= atol, f"max abs error {err:.3g} > {atol:.3g}"


@batch_shapes
def test_random_lands_on_group(backend, group_case, group, batch_shape, atol):
    name, n, block = group_case
    x = sample(backend, group, batch_shape)
    assert tuple(x.shape) == batch_shape + (n, n)
    assert group_violation(name, backend.numpy(x), block) <= atol
    assert group.is_member(x)


@batch_shapes
def test_exp_lands_on_group(backend, group_case, group, tol, batch_shape, atol):
    name, n, block = group_case
    x = group.exp(sample_algebra(backend, group, batch_shape))
    assert group_violation(name, backend.numpy(x), block) <= tol
    assert group.is_member(x)


@batch_shapes
@pytest.mark.parametrize("complex_input", [False, True], ids=["real-m", "complex-m"])
def test_proj_is_an_orthogonal_idempotent_projection_onto_the_algebra(backend, group_case, group, tol, batch_shape,
                                                                      complex_input, atol):
    name, n, block = group_case
    m = backend.array(ambient(0, batch_shape + (n, n), complex_input and group.is_complex))
    p = group.proj(m)
    assert algebra_violation(name, backend.numpy(p), block) <= atol
    close(backend.numpy(group.proj(p)), backend.numpy(p), atol)
    # orthogonal: the residual m − Π(m) is orthogonal to every algebra element
    b = sample_algebra(backend, group, batch_shape)
    residual = m.to(p.dtype) - p if hasattr(m, "to") else m - p
    close(backend.numpy(group.inner(residual, b)), np.zeros(batch_shape), tol)


def algebra_rank(backend, group):
    """dim g counted independently of ``dim``: the rank of Π over a real basis of the ambient
    matrices (n² real units, plus n² imaginary ones on the complex groups)."""
    n = group.n
    units = np.eye(n * n).reshape(n * n, n, n)
    ambient_basis = np.concatenate([units, 1j * units]) if group.is_complex else units
    images = backend.numpy(group.proj(backend.array(ambient_basis))).reshape(len(ambient_basis), -1)
    real_images = np.concatenate([images.real, images.imag], axis=-1)
    return np.linalg.matrix_rank(real_images, tol=1e-4)


@batch_shapes
def test_features_are_the_supported_entries_and_carry_the_inner_product(backend, group_case, group, batch_shape, atol):
    """features(x) against docs/design.md's (Models) definition entry by entry, its length, and (the readout's and
    the prototype readout's premise) <x, y> = features(x) · features(y) on the group."""
    name, n, block = group_case
    x, y = sample(backend, group, batch_shape, seed=3), sample(backend, group, batch_shape, seed=4)
    features = backend.numpy(group.features(x))
    assert features.shape == batch_shape + (group.num_features,)
    for i in np.ndindex(batch_shape):
        close(features[i], state_features(name, backend.numpy(x)[i], block), atol)
    dot = np.sum(features * backend.numpy(group.features(y)), axis=-1)
    close(dot, backend.numpy(group.inner(x, y)), group_atol(backend.dtype, n))


def test_num_features_of_the_structured_groups(backend):
    """docs/design.md (Models): all n² entries (2n² complex) on the dense groups, 2n on T, k·b² on BO."""
    expected = {("O", 5, None): 25, ("SO", 5, None): 25, ("GL", 5, None): 25, ("U", 5, None): 50,
                ("SU", 5, None): 50, ("T", 5, None): 10, ("BO", 6, 2): 12, ("BO", 6, 3): 18}
    for (name, n, block), count in expected.items():
        assert backend.group(name, n, block).num_features == count, name


@batch_shapes
def test_distance_is_the_unitarity_defect(backend, group_case, group, batch_shape, atol):
    """distance(x) = max|xᴴx − I| per matrix (computed independently), 0 on the group; 0 for GL,
    which is dense among the matrices."""
    name, n, block = group_case
    on = backend.numpy(group.distance(sample(backend, group, batch_shape)))
    assert on.shape == batch_shape and np.all(on <= group_atol(backend.dtype, n))
    off = ambient(12, batch_shape + (n, n), group.is_complex)
    off_distance = backend.numpy(group.distance(backend.array(off)))
    close(off_distance, np.zeros(batch_shape) if name == "GL" else unitarity_defect(off),
          group_atol(backend.dtype, n) * max(1.0, np.max(np.abs(off), initial=0.0)) ** 2)


@batch_shapes
def test_packed_form_agrees_with_the_matrices(backend, group, tol, batch_shape, atol):
    """unpack∘pack is the identity on the group, and packed_exp / packed_mul / packed_features
    are exp∘hat / mul / features of the unpacked matrices (themselves checked against oracles)."""
    x, y = sample(backend, group, batch_shape, seed=3), sample(backend, group, batch_shape, seed=4)
    p, q = group.pack(x), group.pack(y)
    packed_reals = np.prod(p.shape[len(batch_shape):]) * (2 if group.is_complex else 1)
    assert packed_reals == group.num_features  # the packed form stores the support, nothing else
    close(backend.numpy(group.unpack(p)), backend.numpy(x), atol)
    close(backend.numpy(group.unpack(group.packed_mul(p, q))), backend.numpy(group.mul(x, y)), tol)
    close(backend.numpy(group.packed_features(p)), backend.numpy(group.features(x)), atol)
    c = backend.array(np.random.default_rng(5).standard_normal(batch_shape + (group.dim,)))
    close(backend.numpy(group.unpack(group.packed_exp(c))), backend.numpy(group.exp(group.hat(c))), tol)


@pytest.mark.parametrize("side", ["left", "right"])
def test_mul_translates_ambient_matrices(backend, group_case, group, side, atol):
    """mul(x, a) = x a and mul(a, x) = a x for an element x and any ambient a (the translations
    of proj_tangent and retr): the structured products must stay exact with one dense factor."""
    name, n, block = group_case
    x = sample(backend, group, (3,))
    a = ambient(13, (3, n, n), group.is_complex)
    got = group.mul(x, backend.array(a)) if side == "left" else group.mul(backend.array(a), x)
    expected = backend.numpy(x) @ a if side == "left" else a @ backend.numpy(x)
    close(backend.numpy(got), expected, group_atol(backend.dtype, n) * max(1.0, np.abs(a).max()))


@batch_shapes
def test_hat_and_vee_are_inverse_and_the_basis_is_orthonormal(backend, group_case, group, batch_shape, atol):
    name, n, block = group_case
    assert group.dim == algebra_rank(backend, group)
    c = backend.array(np.random.default_rng(2).standard_normal(batch_shape + (group.dim,)))
    a = group.hat(c)
    assert algebra_violation(name, backend.numpy(a), block) <= atol
    close(backend.numpy(group.vee(a)), backend.numpy(c), atol)
    a = sample_algebra(backend, group, batch_shape)
    close(backend.numpy(group.hat(group.vee(a))), backend.numpy(a), atol)
    basis = group.hat(backend.array(np.eye(group.dim)))  # [dim, n, n]
    gram = group.inner(basis[:, None], basis[None, :])
    close(backend.numpy(gram), np.eye(group.dim), atol)


@batch_shapes
def test_exp_one_parameter_subgroup_identities(backend, group, tol, batch_shape, atol):
    a = sample_algebra(backend, group, batch_shape)
    eye = backend.numpy(group.identity(batch_shape, dtype=backend.real_dtype()))
    close(backend.numpy(group.exp(0 * a)), eye, atol)
    close(backend.numpy(group.mul(group.exp(a), group.exp(-a))), eye, tol)
    s, t = 0.3, -1.1
    close(backend.numpy(group.exp((s + t) * a)),
          backend.numpy(group.mul(group.exp(s * a), group.exp(t * a))), tol)


@batch_shapes
@pytest.mark.parametrize("scale", [1e-8, 0.03, 1.0, 10.0, 100.0], ids=["1e-8", "0.03", "1", "10", "100"])
def test_exp_matches_a_taylor_series_and_scipy(backend, group_case, group, batch_shape, scale, atol):
    """Batch shapes () and (1,) included: torch.linalg.matrix_exp loses digits there."""
    name, n, block = group_case
    a = sample_algebra(backend, group, batch_shape, scale=scale / max(1, group.dim) ** 0.5)
    a64 = backend.numpy(a).astype(np.complex128 if group.is_complex else np.float64)
    expected = taylor_expm(a64)
    np.testing.assert_allclose(scipy.linalg.expm(a64), expected, atol=EXPM_ORACLE_RTOL * max(1, np.abs(expected).max()))
    if np.abs(expected).max() > np.finfo(backend.numpy(a).dtype).max:
        pytest.skip("exp(a) overflows this dtype (GL at norm 100 in float32: entries ≈ 1e45)")
    tol = group_atol(backend.dtype, n) * max(1.0, np.abs(expected).max())
    close(backend.numpy(group.exp(a)), expected, tol)


@batch_shapes
def test_inner_product_is_bi_invariant(backend, compact_case, batch_shape, atol):
    """Compact groups only: GL's inner product is not bi-invariant."""
    name, n, block = compact_case
    group = backend.group(name, n, block)
    tol = group_atol(backend.dtype, group.n)
    x, y = sample(backend, group, batch_shape, seed=3), sample(backend, group, batch_shape, seed=4)
    a, b = (backend.array(ambient(s, batch_shape + (n, n), group.is_complex)) for s in (5, 6))
    moved = group.inner(group.mul(group.mul(x, a), y), group.mul(group.mul(x, b), y))
    close(backend.numpy(moved), backend.numpy(group.inner(a, b)), tol)


@pytest.mark.parametrize("operation", ["exp", "proj", "hat-vee", "nearest", "proj_tangent", "retr"])
def test_batched_equals_per_element_loop(backend, group_case, group, operation, atol):
    name, n, block = group_case
    batch_shape = (2, 3)
    x = sample(backend, group, batch_shape)
    a = sample_algebra(backend, group, batch_shape)
    m = backend.array(ambient(7, batch_shape + (n, n), group.is_complex))
    u = group.mul(x, a)
    apply = {
        "exp": lambda i: group.exp(a[i]),
        "proj": lambda i: group.proj(m[i]),
        "hat-vee": lambda i: group.hat(group.vee(a[i])),
        "nearest": lambda i: group.nearest(x[i] + 0.1 * m[i].real),
        "proj_tangent": lambda i: group.proj_tangent(x[i], m[i]),
        "retr": lambda i: group.retr(x[i], u[i]),
    }[operation]
    batched = backend.numpy(apply((slice(None), slice(None))))
    for i in np.ndindex(batch_shape):
        close(batched[i], backend.numpy(apply(i)), atol)


@pytest.mark.parametrize("name", ["O", "SO"])
def test_exp_of_a_2x2_generator_is_the_rotation(backend, name, atol):
    group = backend.group(name, 2)
    theta = 0.7
    rotation = group.exp(group.hat(backend.array(np.array([np.sqrt(2) * theta]))))
    expected = np.array([[np.cos(theta), np.sin(theta)], [-np.sin(theta), np.cos(theta)]])
    close(backend.numpy(rotation), expected, atol)


def test_torus_exp_is_elementwise_phase(backend, atol):
    group = backend.group("T", 3)
    theta = np.array([0.5, -2.0, 3.0])
    close(backend.numpy(group.exp(group.hat(backend.array(theta)))), np.diag(np.exp(1j * theta)), atol)


@pytest.mark.parametrize("name", ["O", "SO", "U", "SU", "T", "BO"])
def test_nearest_projects_onto_the_group(backend, name, atol):
    n, block = 4, (2 if name == "BO" else None)
    group = backend.group(name, n, block)
    tol = group_atol(backend.dtype, group.n)
    x = sample(backend, group, (5,))
    close(backend.numpy(group.nearest(x)), backend.numpy(x), tol)
    noisy = backend.numpy(x) + 0.05 * ambient(8, (5, n, n), group.is_complex)
    fixed = backend.numpy(group.nearest(backend.array(noisy)))
    assert group_violation(name, fixed, block) <= tol
    if name in ("O", "U"):  # the polar factor, computed independently by scipy
        close(fixed, np.stack([scipy.linalg.polar(m)[0] for m in noisy]), tol)
    # no group element sampled nearby is closer
    others = backend.numpy(sample(backend, group, (200, 5), seed=9))
    assert np.all(np.linalg.norm(fixed - noisy, axis=(-2, -1)) <=
                  np.linalg.norm(others - noisy, axis=(-2, -1)).min(axis=0) + atol)


def test_nearest_special_orthogonal_fixes_the_determinant(backend, atol):
    group = backend.group("SO", 3)
    tol = group_atol(backend.dtype, group.n)
    reflection = np.diag([1.0, 1.0, -1.0]) + 0.01
    fixed = backend.numpy(group.nearest(backend.array(reflection)))
    assert np.linalg.det(fixed) == pytest.approx(1.0, abs=tol)


@batch_shapes
def test_proj_tangent_and_retr(backend, group_case, group, tol, batch_shape, atol):
    name, n, block = group_case
    x = sample(backend, group, batch_shape)
    u = backend.array(ambient(10, batch_shape + (n, n), group.is_complex))
    v = group.proj_tangent(x, u)
    close(backend.numpy(group.proj_tangent(x, v)), backend.numpy(v), tol)
    assert algebra_violation(name, backend.numpy(group.mul(group.inv(x), v)), block) <= tol
    y = group.retr(x, v)
    assert group_violation(name, backend.numpy(y), block) <= tol


HAAR_TRACE_MOMENT = {  # E|tr x|² under Haar measure
    ("O", 1): 1, ("O", 2): 1, ("O", 3): 1, ("O", 5): 1,
    ("SO", 1): 1, ("SO", 2): 2, ("SO", 3): 1, ("SO", 5): 1,
    ("U", 1): 1, ("U", 2): 1, ("U", 3): 1, ("U", 5): 1,
    ("SU", 1): 1, ("SU", 2): 1, ("SU", 3): 1, ("SU", 5): 1,
    ("T", 1): 1, ("T", 2): 2, ("T", 3): 3, ("T", 5): 5,
    ("BO", 1): 1, ("BO", 2): 1, ("BO", 4): 2, ("BO", 6): 2,
}


def test_haar_trace_moment(backend, compact_case):
    """E|tr x|² is 1 on O(n), U(n), SU(n), 2 on SO(2), n on T(n): a QR without the phase fix,
    or a biased SO/SU correction, moves it. (GL has no Haar probability measure.)"""
    name, n, block = compact_case
    group = backend.group(name, n, block)
    x = backend.numpy(sample(backend, group, (4000,), seed=11))
    moment = np.mean(np.abs(np.trace(x, axis1=-2, axis2=-1)) ** 2)
    assert moment == pytest.approx(HAAR_TRACE_MOMENT[name, n], abs=HAAR_MOMENT_ATOL * max(1, n / 2))


def test_sampling_is_repeatable_from_the_seed(backend, group_case, group):
    name, n, block = group_case
    first, again = (backend.numpy(sample(backend, group, (4,), seed=5)) for _ in range(2))
    np.testing.assert_array_equal(first, again)
    if name not in ("SO", "SU") or n > 1:
        assert not np.array_equal(first, backend.numpy(sample(backend, group, (4,), seed=6)))


@pytest.mark.parametrize("n, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError)],
                         ids=["zero", "negative", "float", "bool"])
def test_bad_size_is_refused(backend, n, error):
    with pytest.raises(error, match="n must"):
        backend.group("O", n)


def test_bad_group_arguments_are_refused(backend):
    with pytest.raises(ValueError, match="unknown group"):
        backend.group("Sp", 4)
    with pytest.raises(ValueError, match="divisible"):
        backend.group("BO", 5, 2)
    with pytest.raises(ValueError, match="only applies"):
        backend.group("O", 4, 2)


def test_membership_reasons(backend):
    group = backend.group("SO", 3)
    cases = {
        "shape": backend.array(np.eye(4)),
        "complex": backend.array(np.eye(3) + 0j),
        "non-finite": backend.array(np.full((3, 3), np.nan)),
        "unitary": backend.array(2 * np.eye(3)),
        "det": backend.array(np.diag([1.0, 1.0, -1.0])),
    }
    for expected, x in cases.items():
        ok, reason = group.is_member(x, explain=True)
        assert not ok and expected in reason, (expected, reason)
        assert group.is_member(x) is False
    assert backend.group("T", 2).is_member(backend.array(np.array([[0, 1], [1, 0]]) + 0j), explain=True)[1] \
        .startswith("not diagonal")
    assert "block" in backend.group("BO", 4, 2).is_member(backend.array(np.eye(4)[[1, 2, 0, 3]]), explain=True)[1]
    assert "singular" in backend.group("GL", 2).is_member(backend.array(np.zeros((2, 2))), explain=True)[1]


def test_group_manifold_random_draws_from_the_global_generator_without_reseeding_it():
    from manifold_impl.manifolds import GroupManifold

    manifold = GroupManifold(get_torch_group("O", 4))
    torch.manual_seed(0)
    first, after_first = manifold.random(2, 4, 4), torch.rand(3)
    torch.manual_seed(0)
    second, after_second = manifold.random(2, 4, 4), torch.rand(3)
    torch.testing.assert_close(second, first, rtol=0, atol=0)
    torch.testing.assert_close(after_second, after_first, rtol=0, atol=0)  # the global stream goes on, unreseeded
    generator = torch.Generator().manual_seed(5)
    torch.testing.assert_close(manifold.random(2, 4, 4, generator=generator),
                               get_torch_group("O", 4).random((2,), generator=torch.Generator().manual_seed(5)))


def test_torus_nearest_keeps_nan_instead_of_returning_the_identity():
    from manifold_impl.manifolds import GroupManifold

    nan = np.full((2, 3, 3), np.nan)
    with np.errstate(invalid="ignore"):  # NaN / NaN, as intended
        assert np.isnan(np.diagonal(REFERENCE_GROUPS["T"](3).nearest(nan), axis1=-2, axis2=-1)).all()
    projected = GroupManifold(get_torch_group("T", 3)).projx(torch.from_numpy(nan))
    assert torch.isnan(torch.diagonal(projected, dim1=-2, dim2=-1)).all()
    zero = torch.zeros(1, 3, 3, dtype=torch.complex128)  # an exact zero entry still gets the phase 1
    torch.testing.assert_close(get_torch_group("T", 3).nearest(zero), torch.eye(3, dtype=torch.complex128)[None])
