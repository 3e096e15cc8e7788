"""The torch tree's closed-form exponentials (so(2), su(2), the 2×2 and 3×3 blocks of BO, so(3) by
Rodrigues' formula) against scipy.linalg.expm, and their gradients against finite differences and
against autograd through the general exponential, in float64 and float32."""

import numpy as np
import pytest
import scipy.linalg
import torch

import manifold_impl.groups
from manifold_impl.groups import get_group
from manifold_impl.linalg import expm, from_blocks, to_blocks
from parity_tests.tolerances import CLOSED_FORM_EPS, GROUP_ATOL, PARITY

# (name, n, block): every group whose exponential has a closed form in the torch tree.
CLOSED = [("O", 2, None), ("SO", 2, None), ("O", 3, None), ("SO", 3, None), ("SU", 2, None),
          ("BO", 6, 2), ("BO", 6, 3)]
CLOSED_IDS = [f"{name}{n}" + (f"b{block}" if block else "") for name, n, block in CLOSED]
DTYPES = {"float64": torch.float64, "float32": torch.float32}

# Rotation angles θ from zero through the switches between the series and sin θ/θ (θ² = 1.04e-4 in
# float64, 0.0844 in float32, and the half angles θ²/4 at the same bounds), each approached from
# both sides, to many turns.
SCALES = [0.0, 1e-9, 0.0101, 0.0103, 0.0203, 0.0205, 0.289, 0.292, 0.58, 0.582, 1.0, 3.0, 10.0, 100.0]


def coordinates(group, theta, seed, dtype, batch=(4,)):
    """Coordinates of algebra elements whose every block rotates by exactly θ (θ² = ½‖a_block‖²_F,
    and the basis is orthonormal, so a block's coordinates have norm √2 θ)."""
    blocks = group.n // group.block if group.name == "BO" else 1
    c = torch.randn(batch + (blocks, group.dim // blocks), generator=torch.Generator().manual_seed(seed),
                    dtype=torch.float64)
    c = np.sqrt(2.0) * theta * c / c.norm(dim=-1, keepdim=True)
    return c.flatten(-2).to(dtype)


@pytest.fixture(params=CLOSED, ids=CLOSED_IDS)
def group(request):
    return get_group(*request.param)


def test_the_closed_form_path_runs_without_the_general_exponential(group, monkeypatch):
    """The tests below check the closed forms, not a fallback to ``expm``."""
    def refuse(a):
        raise AssertionError("the general exponential was called")

    monkeypatch.setattr(manifold_impl.groups, "expm", refuse)
    group.exp(group.hat(coordinates(group, 1.0, 0, torch.float64)))


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("scale", SCALES)
def test_values_match_scipy(group, scale, dtype):
    a = group.hat(coordinates(group, scale, 1, DTYPES[dtype]))
    a64 = a.to(torch.complex128 if group.is_complex else torch.float64).numpy()
    expected = np.stack([scipy.linalg.expm(m) for m in a64])
    got = group.exp(a)
    assert got.dtype == a.dtype
    err = np.max(np.abs(got.detach().numpy() - expected))
    assert err <= CLOSED_FORM_EPS * torch.finfo(DTYPES[dtype]).eps * max(1.0, scale), err


@pytest.mark.parametrize("scale", [0.0, 1e-9, 0.0101, 0.0103, 0.0205, 1.0, 10.0])
def test_gradients_match_finite_differences(group, scale):
    """float64 ``torch.autograd.gradcheck`` (central differences) through hat and the closed form."""
    c = coordinates(group, scale, 2, torch.float64, batch=(2,)).requires_grad_()
    assert torch.autograd.gradcheck(lambda c: torch.view_as_real(group.exp(group.hat(c)))
                                    if group.is_complex else group.exp(group.hat(c)), (c,))


def general_exp(group, a):
    """The general exponential on the same argument (on blocks for BO, as the group does)."""
    if group.name == "BO":
        return from_blocks(expm(to_blocks(a, group.block)))
    return expm(a)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("scale", [1e-9, 0.0101, 0.0103, 0.289, 0.292, 0.58, 0.582, 1.0, 10.0])
def test_gradients_match_the_general_exponential(group, scale, dtype):
    """Vector–Jacobian products of the closed form in ``dtype`` against autograd through the
    general exponential (its own written-out backward) in float64, for a random cotangent."""
    def vjp(exp, c, dtype):
        c = c.detach().to(dtype).requires_grad_()
        out = exp(group, group.hat(c))
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
        loss = (out.real * weight.to(out.real.dtype)).sum()
        if group.is_complex:
            loss = loss + (out.imag * weight.flip(-1).to(out.real.dtype)).sum()
        loss.backward()
        return c.grad.double()

    c = coordinates(group, scale, 3, torch.float64)
    expected = vjp(general_exp, c, torch.float64)
    got = vjp(lambda g, a: g.exp(a), c, DTYPES[dtype])
    rtol = PARITY[dtype]["gradient"] if dtype == "float32" else GROUP_ATOL["float64"] * 100
    assert torch.max(torch.abs(got - expected)) <= rtol * max(1.0, torch.max(torch.abs(expected)).item())


@pytest.mark.parametrize("name, n, block", [("T", 4, None), ("BO", 6, 2), ("BO", 6, 3)], ids=["T4", "BO6b2", "BO6b3"])
def test_packed_operations_have_finite_difference_gradients(name, n, block):
    """gradcheck (float64) of the packed exponential, product and features of the structured groups."""
    group = get_group(name, n, block)
    c = torch.randn(2, group.dim, generator=torch.Generator().manual_seed(6), dtype=torch.float64, requires_grad=True)
    d = torch.randn(2, group.dim, generator=torch.Generator().manual_seed(7), dtype=torch.float64, requires_grad=True)

    def real(z):
        return torch.view_as_real(z) if z.is_complex() else z

    assert torch.autograd.gradcheck(lambda c, d: real(group.packed_mul(group.packed_exp(c), group.packed_exp(d))),
                                    (c, d))
    assert torch.autograd.gradcheck(lambda c: group.packed_features(group.packed_exp(c)), (c,))


WRITTEN_OUT = CLOSED + [("T", 4, None), ("BO", 8, 4), ("O", 5, None), ("U", 3, None), ("SU", 3, None), ("GL", 3, None)]


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("scale", [0.0, 1e-9, 0.0101, 0.0103, 0.0203, 0.0205, 0.289, 0.292, 1.0, 10.0])
@pytest.mark.parametrize("name, n, block", WRITTEN_OUT,
                         ids=[f"{name}{n}" + (f"b{block}" if block else "") for name, n, block in WRITTEN_OUT])
def test_the_written_out_packed_exponential_vjp_is_autograds(name, n, block, scale, dtype):
    """``_packed_exp_saving`` gives ``packed_exp``'s bits, and ``_packed_exp_vjp`` (the fused
    recurrence's backward, no autograd) the VJP autograd takes through ``packed_exp``, to rounding."""
    group = get_group(name, n, block)
    c = (coordinates(group, scale, 5, torch.float64) if group.is_compact and name != "T"
         else scale * torch.randn(4, group.dim, generator=torch.Generator().manual_seed(5), dtype=torch.float64))
    c = c.to(DTYPES[dtype]).requires_grad_()
    value = group.packed_exp(c)
    grad = torch.randn(value.shape, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    grad = (torch.complex(grad, grad.flip(-1)) if value.is_complex() else grad).to(value.dtype)
    (expected,) = torch.autograd.grad(value, c, grad)
    written, saved = group._packed_exp_saving(c.detach())
    assert torch.equal(written, value.detach())
    got = group._packed_exp_vjp(saved, grad)
    eps = torch.finfo(DTYPES[dtype]).eps
    assert (got - expected).abs().max() <= 50 * eps * max(1.0, scale) * expected.abs().max().clamp(min=1.0)
