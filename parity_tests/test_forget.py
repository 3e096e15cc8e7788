"""The leaky update (GroupRNNConfig.forget): its polar factor by Newton–Schulz against scipy's, the
near-singular blend, parity of both trees, gradients against finite differences, and that the state
forgets where the paper's update cannot."""

import numpy as np
import pytest
import scipy.linalg
import scipy.stats
import torch

from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from parity_tests.harness import parity
from parity_tests.test_gradients import assert_model_gradients_match_finite_differences
from reference.config import FORGET_GROUPS, GroupRNNConfig, forget_steps
from reference.group_rnn import GroupRNN
from reference.groups import get_group
from reference.linalg import polar_newton_schulz
from reference.params import random_params


def config(group="O", forget="constant", alpha=0.4, **fields):
    return GroupRNNConfig(**{"vocab_size": 7, "group": group, "n": 4, "embedding_dim": 5, "recurrence": "loop",
                             "forget": forget, "forget_alpha": alpha, **({"block": 2} if group == "BO" else {}),
                             **fields})


@pytest.mark.parametrize("alpha", [0.05, 0.25, 0.42, 0.499])
@pytest.mark.parametrize("kind", ["orthogonal", "unitary"])
def test_the_iteration_reaches_scipys_polar_factor_of_every_blend(kind, alpha):
    rng = np.random.default_rng(0)
    group = scipy.stats.ortho_group if kind == "orthogonal" else scipy.stats.unitary_group
    states = np.stack([group.rvs(5, random_state=rng) for _ in range(4)])
    blend = (1 - alpha) * states + alpha * np.eye(5)
    factor = polar_newton_schulz(blend, forget_steps(alpha))
    expected = np.stack([scipy.linalg.polar(m)[0] for m in blend])
    assert np.abs(factor - expected).max() < 1e-10


@pytest.mark.parametrize("alpha", [0.45, 0.49, 0.4999])
def test_the_blend_of_a_state_with_eigenvalue_minus_one_stays_invertible_below_one_half(alpha):
    """H with eigenvalues −1 (a rotation by π) and α near 1/2: the blend's smallest singular value
    is 1 − 2α, and the fixed step count still reaches the polar factor (here H's own eigenbasis
    with the −1 kept: a contraction by (1 − 2α) that the factor undoes)."""
    rotation = scipy.stats.ortho_group.rvs(4, random_state=1)
    state = rotation @ np.diag([-1.0, -1.0, 1.0, 1.0]) @ rotation.T  # on SO(4), two eigenvalues −1
    blend = (1 - alpha) * state + alpha * np.eye(4)
    assert np.linalg.svd(blend, compute_uv=False).min() == pytest.approx(1 - 2 * alpha, rel=1e-9)
    factor = polar_newton_schulz(blend, forget_steps(alpha))
    assert np.abs(factor - state).max() < 1e-10  # polar((1 − α)H + αI) = H where H's eigenvalues are ±1
    assert np.abs(factor - scipy.linalg.polar(blend)[0]).max() < 1e-10


def test_forget_steps_grow_as_alpha_nears_one_half():
    steps = [forget_steps(alpha) for alpha in (0.1, 0.25, 0.42, 0.49, 0.4999)]
    assert steps == sorted(steps) and steps[0] >= 4 and steps[-1] <= 40


@pytest.mark.parametrize("fields, message", [
    ({"alpha": 0.5}, "forget_alpha must lie in \\(0, 1/2\\)"),
    ({"alpha": 0.0}, "forget_alpha must lie in \\(0, 1/2\\)"),
    ({"alpha": None}, "needs forget_alpha"),
    ({"group": "SU"}, "polar factor of an SU blend leaves det = 1"),
    ({"group": "GL"}, "GL's states are not unitary"),
    ({"recurrence": "scan", "recurrent": False}, "forget needs recurrence='loop' or 'fused', not 'scan'"),
    ({"recurrence": "fused", "keep_state_every": 2}, "forget keeps every state"),
    ({"forget": "none"}, "forget_alpha only applies with forget="),
    ({"forget": "sometimes"}, "unknown forget 'sometimes'"),
])
def test_the_config_refuses_a_forget_it_cannot_run(fields, message):
    with pytest.raises((ValueError, TypeError), match=message):
        config(**fields)


@pytest.mark.parametrize("recurrence", ["loop", "fused"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("forget", ["constant", "gate"])
@pytest.mark.parametrize("group", FORGET_GROUPS)
def test_parity_of_the_leaky_update(group, forget, dtype, recurrence):
    report = parity(config(group, forget, recurrence=recurrence), seed=3, dtype=dtype, batch=2, length=5)
    assert report["pass"], report


@pytest.mark.parametrize("fields", [
    {"recurrent": False},
    {"truncate_every": 3, "reproject_every": 2},
    {"mixing": "lowrank", "mixing_rank": 2, "update_bound": 1.5},
], ids=["input_driven", "truncate_reproject", "mixing_bound"])
@pytest.mark.parametrize("forget", ["constant", "gate"])
@pytest.mark.parametrize("group", ["O", "U", "T", "BO"])
def test_the_fused_backward_of_the_leaky_update_equals_autograd_through_the_loop(group, forget, fields):
    """The written-out VJP (the polar iterates, the blend and the gate, ``_forget_vjp``) against torch's
    autograd through every step of ``recurrence='loop'``, on the same parameters, in float64; the
    gate's bias set to 0 so that α_t is far from 0 and every term of the gate carries weight."""
    grads = []
    for recurrence in ("loop", "fused"):
        model = TorchGroupRNN(config(group, forget, recurrence=recurrence, **fields), dtype=torch.float64,
                              generator=torch.Generator().manual_seed(6))
        if model.cell.forget_gate is not None:
            with torch.no_grad():
                model.cell.forget_gate.bias.zero_()
        tokens = torch.randint(0, 7, (3, 8), generator=torch.Generator().manual_seed(7))
        logits, cache = model(tokens)
        (logits.square().mean() + cache.state.abs().square().sum()).backward()
        grads.append({key: p.grad for key, p in model.named_parameters()})
    assert list(grads[0]) == list(grads[1])
    for key in grads[0]:
        torch.testing.assert_close(grads[1][key], grads[0][key], rtol=1e-10, atol=1e-12, msg=key)


@pytest.mark.parametrize("forget", ["constant", "gate"])
@pytest.mark.parametrize("group", FORGET_GROUPS)
def test_reference_gradients_of_the_leaky_update_match_finite_differences(group, forget):
    """Every parameter, one random direction each (the polar factor's k steps differentiated through)."""
    assert_model_gradients_match_finite_differences(GroupRNN(config(group, forget, alpha=0.3)), np.random.default_rng(2))


@pytest.mark.parametrize("group", ["O", "T"])
def test_the_leaky_state_forgets_its_first_input_and_the_papers_cannot(group):
    """Two sequences that differ in their first token only: on the paper's update (input-driven)
    their states stay exactly as far apart (right-multiplication by exp(A_t) is an isometry); with
    a constant α they converge."""
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 7, size=(1, 40))
    other = tokens.copy()
    other[0, 0] = (tokens[0, 0] + 1) % 7

    def gaps(fields):
        model = GroupRNN(config(group, recurrent=False, **fields))
        params = random_params(model.param_spec(), np.random.default_rng(5))
        params["cell.initial_state"] = get_group(group, 4).identity(())
        states = [model.forward(params, t)[1].states[0] for t in (tokens, other)]
        return np.linalg.norm(states[0] - states[1], axis=(-2, -1))

    paper = gaps({"forget": "none", "alpha": None})
    assert paper[0] > 0.1 and np.allclose(paper, paper[0], rtol=1e-10)
    leaky = gaps({})
    assert leaky[-1] < 1e-3 * leaky[0]
