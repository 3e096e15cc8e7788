"""Gradients: reference autograd vs central finite differences, torch gradcheck, and the pinned
complex-gradient convention between the two."""

import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
import scipy.linalg
import torch
from torch.func import functional_call

from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from manifold_impl.groups import get_group as torch_group
from manifold_impl.linalg import expm as torch_expm
from manifold_impl.losses import cross_entropy as torch_cross_entropy
from parity_tests.harness import to_torch
from parity_tests.tolerances import FD_RTOL, FD_STEP
from reference.config import GROUP_NAMES, GroupRNNConfig
from reference.group_rnn import GroupRNN
from reference.linalg import expm
from reference.losses import cross_entropy
from reference.optim import ambient_gradients
from reference.params import random_params


def test_autograd_complex_gradient_is_the_conjugate_of_torchs():
    """L(z) = Re Σ c z: torch's gradient is ∂L/∂x + i ∂L/∂y = conj(c); autograd's is c."""
    c = np.array([1.0 + 2.0j, -0.5 + 0.3j])
    z = np.array([0.2 - 1.0j, 0.7 + 0.1j])
    autograd_grad = autograd.grad(lambda v: anp.sum(anp.real(c * v)))(z)
    zt = torch.tensor(z, requires_grad=True)
    (torch.tensor(c) * zt).real.sum().backward()
    np.testing.assert_allclose(autograd_grad, c)
    np.testing.assert_allclose(zt.grad.numpy(), np.conj(c))
    np.testing.assert_allclose(ambient_gradients({"z": autograd_grad})["z"], zt.grad.numpy())


def central_difference(f, x, direction, step=FD_STEP):
    return (f(x + step * direction) - f(x - step * direction)) / (2 * step)


def directional(autograd_grad, direction):
    """d/dh f(x + h E) from an autograd gradient (its convention: Re Σ g ⊙ E)."""
    return float(np.sum(np.real(autograd_grad * direction)))


@pytest.mark.parametrize("kind", ["real", "complex"])
@pytest.mark.parametrize("batch_shape", [(), (2,)], ids=["b()", "b(2,)"])
@pytest.mark.parametrize("scale", [0.1, 1.0, 4.0], ids=["0.1", "1", "4"])
def test_reference_expm_vjp_matches_finite_differences(kind, batch_shape, scale):
    rng = np.random.default_rng(0)
    shape = batch_shape + (4, 4)

    def draw():
        m = rng.standard_normal(shape)
        return m + 1j * rng.standard_normal(shape) if kind == "complex" else m

    a, weights, direction = scale * draw() / 2, draw(), draw()
    direction /= np.linalg.norm(direction)

    def f(x):
        return anp.sum(anp.real(weights * expm(x)))

    exact = directional(autograd.grad(f)(a), direction)
    assert central_difference(f, a, direction) == pytest.approx(exact, rel=FD_RTOL, abs=FD_RTOL)


@pytest.mark.parametrize("group", GROUP_NAMES)
@pytest.mark.parametrize("readout, mixing, bound", [("linear", "none", None), ("prototype", "lowrank", None),
                                                   ("linear", "scalar", 0.5)])
def test_reference_model_gradients_match_finite_differences(group, readout, mixing, bound):
    """Every parameter, one random direction each (reprojection off: its gradient is defined as
    straight-through, which finite differences of an off-group perturbation do not see)."""
    config = GroupRNNConfig(vocab_size=7, group=group, n=4, embedding_dim=5, readout=readout,
                            mixing=mixing, mixing_rank=2 if mixing == "lowrank" else None, update_bound=bound)
    assert_model_gradients_match_finite_differences(GroupRNN(config), np.random.default_rng(1))


def assert_model_gradients_match_finite_differences(model, rng):
    """The loss of a reference group RNN (vocabulary 7) on random tokens: autograd's gradient of
    every parameter against central differences, along one random direction each."""
    params = random_params(model.param_spec(), rng)
    tokens = rng.integers(0, 7, size=(2, 5))

    def loss(p):
        return cross_entropy(model.forward(p, tokens[:, :-1])[0], tokens[:, 1:])

    grads = autograd.grad(loss)(params)
    for key, value in params.items():
        direction = rng.standard_normal(np.shape(value))
        if np.iscomplexobj(value):
            direction = direction + 1j * rng.standard_normal(np.shape(value))
        direction /= np.linalg.norm(direction)

        def along(x, key=key):
            return loss({**params, key: x})

        fd = central_difference(along, value, direction)
        assert fd == pytest.approx(directional(grads[key], direction), rel=FD_RTOL, abs=FD_RTOL), key


@pytest.mark.parametrize("name", GROUP_NAMES)
def test_torch_group_exp_gradcheck(name):
    group = torch_group(name, 4)
    coordinates = torch.randn(2, group.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0),
                              requires_grad=True)
    assert torch.autograd.gradcheck(lambda c: group.exp(group.hat(c)), (coordinates,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 6.0])
def test_torch_expm_gradcheck_on_general_matrices(dtype, scale):
    a = scale * torch.randn(3, 4, 4, dtype=dtype, generator=torch.Generator().manual_seed(1)) / 2
    assert torch.autograd.gradcheck(torch_expm, (a.requires_grad_(),))


@pytest.mark.parametrize("name", GROUP_NAMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", [1e-8, 1e-2, 1.0, 10.0, 100.0])
def test_torch_expm_backward_matches_the_block_exponential(name, dtype, norm):
    """Our written-out backward vs L(aᴴ, g), the top-right block of exp([[aᴴ, g], [0, aᴴ]])
    evaluated by scipy in float64: every group, norms 1e-8 to 1e2, float32 and float64."""
    group = torch_group(name, 6, 2 if name == "BO" else None)
    generator = torch.Generator().manual_seed(3)
    a = group.random_algebra((3,), generator=generator, dtype=dtype)
    a = a * (norm / torch.linalg.matrix_norm(a, ord=2).amax())
    weights = torch.randn(a.shape, generator=generator, dtype=torch.float64).to(a.dtype)
    leaf = a.clone().requires_grad_()
    (torch_expm(leaf) * weights.conj()).real.sum().backward()
    n = a.shape[-1]
    expected = []
    for ai, gi in zip(a.detach().numpy().astype(np.complex128), weights.numpy().astype(np.complex128)):
        block = np.zeros((2 * n, 2 * n), dtype=np.complex128)
        block[:n, :n] = block[n:, n:] = ai.conj().T
        block[:n, n:] = gi
        expected.append(scipy.linalg.expm(block)[:n, n:])
    expected = np.array(expected)
    expected = expected if leaf.is_complex() else expected.real
    scale = np.abs(expected).max()
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    np.testing.assert_allclose(leaf.grad.numpy(), expected, atol=tol * max(scale, 1.0) * (1 + np.log2(1 + norm)))


def test_torch_expm_mixed_norm_batch_is_accurate():
    """One scaling for the whole batch: a tiny matrix next to a large one stays accurate."""
    a = torch.randn(2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    a = a - a.mT
    a[0] *= 1e-8 / torch.linalg.matrix_norm(a[0], ord=2)
    a[1] *= 100.0 / torch.linalg.matrix_norm(a[1], ord=2)
    expected = np.array([scipy.linalg.expm(m) for m in a.numpy()])
    np.testing.assert_allclose(torch_expm(a).numpy(), expected, atol=1e-13)


def test_torch_expm_refuses_second_derivatives():
    a = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(torch_expm(a).sum(), a, create_graph=True)
    with pytest.raises(RuntimeError):
        grad.sum().backward()


@pytest.mark.parametrize("group", GROUP_NAMES)
def test_torch_model_gradcheck(group):
    """gradcheck of the torch loss w.r.t. the group-valued H_0 and the input map, in float64
    (reprojection off, as in the finite-difference test above)."""
    config = GroupRNNConfig(vocab_size=7, group=group, n=4, embedding_dim=5, readout="prototype",
                            mixing="scalar")
    reference = GroupRNN(config)
    model = TorchGroupRNN(config, dtype=torch.float64)
    params = to_torch(random_params(reference.param_spec(), np.random.default_rng(2)), torch.float64, "cpu")
    tokens = torch.from_numpy(np.random.default_rng(3).integers(0, 7, size=(2, 5)))
    keys = ["cell.initial_state", "cell.input_map.weight"]

    def loss(*values):
        logits, _ = functional_call(model, {**params, **dict(zip(keys, values))}, (tokens[:, :-1],))
        return torch_cross_entropy(logits, tokens[:, 1:])

    assert torch.autograd.gradcheck(loss, tuple(params[k].clone().requires_grad_() for k in keys))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex128])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_torch_expm_of_a_matrix_does_not_depend_on_its_batch_mates(dtype, n):
    """Bit for bit, value and gradient: each matrix picks its own scaling and nothing mixes
    matrices of the batch, so neither a large neighbour nor the batch size changes anything."""
    generator = torch.Generator().manual_seed(5 + n)
    a = (torch.randn(7, n, n, generator=generator, dtype=torch.float64) * 0.3).to(dtype)
    weights = torch.randn(7, n, n, generator=generator, dtype=torch.float64).to(dtype)

    def value_and_gradient(batch, w):
        leaf = batch.clone().requires_grad_()
        out = torch_expm(leaf)
        (out * w.conj()).real.sum().backward()
        return out.detach()[0], leaf.grad[0]

    alone = value_and_gradient(a[:1], weights[:1])
    for crowd in (torch.cat([a[:1], 40.0 * a[1:]]), a):
        crowded = value_and_gradient(crowd, weights[:len(crowd)])
        assert torch.equal(alone[0], crowded[0]) and torch.equal(alone[1], crowded[1])


@pytest.mark.parametrize("degree", [12, 18])
def test_torch_expm_schemes_are_taylor_polynomials(degree):
    """Each scheme's table, multiplied out as scalar polynomials, is Σ_{k≤m} x^k / k!."""
    from numpy.polynomial import polynomial

    from manifold_impl.linalg import _T12, _T18

    exponents = (0, 1, 2, 3, 6) if degree == 18 else (0, 1, 2, 3)
    basis = [np.eye(1, 7, k)[0] for k in exponents]
    left, right, addend, outer, shift = (sum(c * p for c, p in zip(row, basis)) for row in
                                         (_T18 if degree == 18 else _T12))
    inner = polynomial.polyadd(polynomial.polymul(left, right), addend)
    taylor = polynomial.polyadd(outer, polynomial.polymul(polynomial.polyadd(shift, inner), inner))
    np.testing.assert_allclose(taylor, [1 / math.factorial(k) for k in range(degree + 1)], rtol=1e-14)


def test_torch_expm_of_a_large_nilpotent_matrix_is_exact():
    """‖a‖ ≫ α (a² = 0, ‖a‖ = 1e13, so f³ = 2^132 would overflow float32): the power-of-two factors
    are applied one at a time. Closed forms: exp(a) = I + a; with x = aᵀ, x² = 0, the gradient of
    Σ exp(a) is L(x, 1) = 1 + (x1 + 1x)/2 + x1x/6."""
    a = torch.tensor([[0.0, 1e13], [0.0, 0.0]], dtype=torch.float32, requires_grad=True)
    value = torch_expm(a)
    assert torch.equal(value.detach(), torch.eye(2) + a.detach())
    value.sum().backward()
    x, ones = a.detach().double().T, torch.ones(2, 2, dtype=torch.float64)
    expected = ones + (x @ ones + ones @ x) / 2 + x @ ones @ x / 6
    torch.testing.assert_close(a.grad.double(), expected, rtol=1e-6, atol=0.0)
