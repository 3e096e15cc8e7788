"""The group RNN's three recurrences (``config.recurrence``) compute one function.

The fused recurrence's backward is written out step by step; its gradients are checked against
autograd through the plain loop (an independent computation: torch's own VJPs of every
operation) and against finite differences (``torch.autograd.gradcheck``).
"""

import dataclasses

import numpy as np
import pytest
import torch

from manifold_impl.group_rnn import GroupRNN, GroupRNNCache, _FusedRecurrence
from parity_tests.harness import to_torch
from reference.config import FORGET_GROUPS, GROUP_NAMES, GroupRNNConfig
from reference.group_rnn import GroupRNN as ReferenceGroupRNN
from reference.params import random_params

OPTIONS = {
    "plain": {},
    "scalar": {"mixing": "scalar"},
    "lowrank": {"mixing": "lowrank", "mixing_rank": 2},
    "lowrank-reproject": {"mixing": "lowrank", "mixing_rank": 2, "reproject_every": 3},
    "lowrank-bound": {"mixing": "lowrank", "mixing_rank": 2, "update_bound": 0.5},
    "lowrank-truncate": {"mixing": "lowrank", "mixing_rank": 2, "truncate_every": 3},
}


def generic_model(config, seed=0):
    """A float64 model with generic parameters (Haar H_0, full-scale U, mixing away from identity)."""
    params = random_params(ReferenceGroupRNN(config).param_spec(), np.random.default_rng(seed))
    model = GroupRNN(config, dtype=torch.float64)
    model.load_state_dict(to_torch(params, torch.float64, "cpu"))
    return model


def dense_states(model, tokens, position):
    """H_1..H_T on n×n matrices, one autograd step at a time, from the group's dense operations
    (exp∘hat, mul, features, nearest) and the bound written out: what every recurrence computed
    before the packed form."""
    cell, group = model.cell, model.group
    drive = cell.input_map(model.embedding(tokens))
    state, states = cell.initial_state.expand(tokens.shape[0], -1, -1), []
    for t in range(tokens.shape[1]):
        c = drive[:, t] if cell.state_map is None else drive[:, t] + cell.state_map(group.features(state))
        m, theta = cell.mixing(c), cell.config.update_bound
        state = group.mul(state, group.exp(group.hat(m if theta is None else theta * torch.tanh(m / theta))))
        every, index = cell.config.reproject_every, position + t + 1
        if every is not None and index % every == 0:
            state = state + (group.nearest(state.detach()) - state.detach())
        states.append(state)
        if cell.config.truncate_every is not None and index % cell.config.truncate_every == 0:
            state = state.detach()
    return torch.stack(states, dim=1)


def gradients(config, length=9, batch=3, position=0, seed=0, dense=False):
    """States and ∂L/∂(every parameter) of a loss that reads the logits and the states; ``dense``: the
    states from ``dense_states`` instead of the model's recurrence."""
    model = generic_model(config, seed)
    rng = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, config.vocab_size, (batch, length), generator=rng)
    start = GroupRNNCache(model.cell.initial_state.expand(batch, -1, -1), position)
    if dense:
        states = dense_states(model, tokens, position)
        logits = model.readout(states)
    else:
        logits, cache = model(tokens, start)
        states = cache.states
    weights = torch.randn(logits.shape, generator=rng, dtype=torch.float64)
    loss = (weights * logits).sum() + (states.real * states.imag.exp()).sum() if states.is_complex() \
        else (weights * logits).sum() + states.square().sum()
    return states.detach(), dict(zip([k for k, _ in model.named_parameters()],
                                     torch.autograd.grad(loss, list(model.parameters()))))


def assert_same_gradients(got, expected, rtol=1e-12):
    """Each parameter's gradient within rtol of the largest entry of its expected gradient."""
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        scale = value.abs().max().item()
        assert scale > 0, key  # every parameter takes part (the test would be vacuous otherwise)
        error = (got[key] - value).abs().max().item()
        assert error <= rtol * scale, f"{key}: {error:.3g} > {rtol} · {scale:.3g}"


@pytest.mark.parametrize("keep_state_every", [None, 4], ids=["stored", "rebuilt"])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("recurrent", [True, False], ids=["recurrent", "input-driven"])
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_fused_gradients_equal_autograd_through_the_loop(group, recurrent, option, keep_state_every):
    if keep_state_every is not None and group == "GL":
        pytest.skip("keep_state_every needs a compact group (the config refuses GL; tested below)")
    config = GroupRNNConfig(vocab_size=7, group=group, n=4, embedding_dim=5, recurrent=recurrent,
                            **OPTIONS[option], recurrence="loop")
    loop_states, loop_grads = gradients(config, position=1)
    fused = dataclasses.replace(config, recurrence="fused", keep_state_every=keep_state_every)
    fused_states, fused_grads = gradients(fused, position=1)
    torch.testing.assert_close(fused_states, loop_states, rtol=0, atol=1e-13)
    assert_same_gradients(fused_grads, loop_grads)


@pytest.mark.parametrize("option", ["plain", "lowrank-bound"])
@pytest.mark.parametrize("group, n", [("O", 2), ("O", 3), ("SO", 3), ("SU", 2)])
def test_fused_gradients_through_the_closed_form_exponentials(group, n, option):
    """The groups whose exponential has a closed form (the fused backward writes out its VJP)."""
    config = GroupRNNConfig(vocab_size=7, group=group, n=n, embedding_dim=5, **OPTIONS[option], recurrence="loop")
    loop_states, loop_grads = gradients(config, position=1)
    fused_states, fused_grads = gradients(dataclasses.replace(config, recurrence="fused"), position=1)
    torch.testing.assert_close(fused_states, loop_states, rtol=0, atol=1e-13)
    assert_same_gradients(fused_grads, loop_grads)


@pytest.mark.parametrize("recurrence, keep_state_every", [("loop", None), ("fused", None), ("fused", 4),
                                                          ("scan", None)], ids=["loop", "fused", "fused-rebuilt", "scan"])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("recurrent", [True, False], ids=["recurrent", "input-driven"])
@pytest.mark.parametrize("group, n, block", [("T", 4, None), ("BO", 4, 2), ("BO", 6, 3)], ids=["T", "BO2", "BO3"])
def test_packed_recurrences_equal_the_dense_steps(group, n, block, recurrent, option, recurrence, keep_state_every):
    """T and BO run on their packed form (diagonal, blocks); states and every gradient equal the dense
    n×n steps of ``dense_states``."""
    if recurrence == "scan" and (recurrent or {"reproject_every", "truncate_every"} & set(OPTIONS[option])):
        pytest.skip("scan is input-driven without re-projection or truncation (the config refuses the rest; "
                    "tested below)")
    config = GroupRNNConfig(vocab_size=7, group=group, n=n, block=block, embedding_dim=5, recurrent=recurrent,
                            **OPTIONS[option], recurrence=recurrence, keep_state_every=keep_state_every)
    dense_states_, dense_grads = gradients(config, position=1, dense=True)
    states, grads = gradients(config, position=1)
    torch.testing.assert_close(states, dense_states_, rtol=0, atol=1e-12)
    # H_0's ambient gradient: the dense steps also read its entries off the support (zero on G), the
    # packed ones do not; the gradient the optimizer uses, its projection onto the tangent space, agrees
    model = generic_model(config)
    for grad in (grads, dense_grads):
        grad["cell.initial_state"] = model.group.proj_tangent(model.cell.initial_state.detach(),
                                                              grad["cell.initial_state"])
    assert_same_gradients(grads, dense_grads)


@pytest.mark.parametrize("group", ["O", "U", "BO", "T"])
def test_rebuilt_states_give_the_stored_modes_gradients_over_a_long_sequence(group):
    """keep_state_every rebuilds up to k − 1 states in reverse from each kept one; over 200 steps
    the gradients stay those of the mode that keeps every state."""
    config = GroupRNNConfig(vocab_size=7, group=group, n=4, embedding_dim=5, mixing="lowrank", mixing_rank=2,
                            reproject_every=50)
    stored_states, stored = gradients(config, length=200, batch=2)
    rebuilt_states, rebuilt = gradients(dataclasses.replace(config, keep_state_every=16), length=200, batch=2)
    torch.testing.assert_close(rebuilt_states, stored_states, rtol=0, atol=0)
    assert_same_gradients(rebuilt, stored, rtol=1e-11)


@pytest.mark.parametrize("recurrent", [True, False], ids=["recurrent", "input-driven"])
def test_fused_states_are_those_computed_without_gradients(recurrent):
    """Under no_grad the fused recurrence runs the loop's steps; with gradients its own forward: the
    same states, bit for bit."""
    config = GroupRNNConfig(vocab_size=7, group="U", n=3, embedding_dim=4, recurrent=recurrent, mixing="scalar",
                            reproject_every=2)
    model = generic_model(config)
    tokens = torch.randint(0, 7, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = model(tokens)[1].states
    fused = model(tokens)[1].states
    assert fused.grad_fn is not None and type(fused.grad_fn).__name__ == "_FusedRecurrenceBackward"
    torch.testing.assert_close(fused.detach(), plain, rtol=0, atol=0)


def test_scan_gradients_equal_the_loop():
    config = GroupRNNConfig(vocab_size=7, group="SU", n=3, embedding_dim=5, recurrent=False, mixing="lowrank",
                            mixing_rank=2, recurrence="loop")
    loop_states, loop_grads = gradients(config)
    scan_states, scan_grads = gradients(dataclasses.replace(config, recurrence="scan"))
    torch.testing.assert_close(scan_states, loop_states, rtol=0, atol=1e-13)
    assert_same_gradients(scan_grads, loop_grads)


def fused_inputs(group_name, recurrent, generator, **fields):
    """Inputs of ``_FusedRecurrence.apply`` after (cell, position) at a small size, float64: a drive,
    a random packed H_0 (``group.pack``) and the cell's own parameters (which its forward reads through the cell)."""
    config = GroupRNNConfig(vocab_size=5, group=group_name, n=3 if group_name != "BO" else 4, embedding_dim=2,
                            recurrent=recurrent, mixing="lowrank", mixing_rank=2, **fields)
    model = generic_model(config)
    cell, dim = model.cell, model.group.dim
    drive = torch.randn(2, 3, dim, generator=generator, dtype=torch.float64, requires_grad=True)
    state = model.group.pack(model.group.random((2,), generator=generator, dtype=torch.float64)).requires_grad_()
    gate = cell.forget_gate
    return cell, [drive, state, None if cell.state_map is None else cell.state_map.weight, cell.mixing.step_size,
                  cell.mixing.left, cell.mixing.right, None if gate is None else gate.weight,
                  None if gate is None else gate.bias]


@pytest.mark.parametrize("keep_state_every", [None, 2], ids=["stored", "rebuilt"])
@pytest.mark.parametrize("recurrent", [True, False], ids=["recurrent", "input-driven"])
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_fused_backward_passes_gradcheck(group, recurrent, keep_state_every):
    if keep_state_every is not None and group == "GL":
        pytest.skip("keep_state_every needs a compact group")
    cell, inputs = fused_inputs(group, recurrent, torch.Generator().manual_seed(3))
    cell.config = dataclasses.replace(cell.config, keep_state_every=keep_state_every)
    assert torch.autograd.gradcheck(lambda *args: _FusedRecurrence.apply(cell, 0, *args), inputs)


@pytest.mark.parametrize("forget", ["constant", "gate"])
@pytest.mark.parametrize("recurrent", [True, False], ids=["recurrent", "input-driven"])
@pytest.mark.parametrize("group", FORGET_GROUPS)
def test_fused_backward_of_the_leaky_update_passes_gradcheck(group, recurrent, forget):
    """The leaky update's written-out VJP (``_forget_vjp``) against finite differences: the gate's
    bias at 0, so that α_t sits mid-range and the blend, the polar iterates and the gate all count."""
    cell, inputs = fused_inputs(group, recurrent, torch.Generator().manual_seed(4), forget=forget, forget_alpha=0.4)
    if cell.forget_gate is not None:
        with torch.no_grad():
            cell.forget_gate.bias.zero_()
    assert torch.autograd.gradcheck(lambda *args: _FusedRecurrence.apply(cell, 0, *args), inputs)


@pytest.mark.parametrize("prefix", [None, 3], ids=["all-states", "first-3-states"])
def test_fused_gradients_when_the_loss_reads_a_prefix_and_backward_runs_twice(prefix):
    """The fused node's U-gradient (one product over all steps) equals per-step autograd, also
    when the loss reads only the first states and when backward runs twice on one graph."""
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 7, size=(2, 6)))

    def run(recurrence):
        config = GroupRNNConfig(vocab_size=7, group="U", n=3, embedding_dim=4, recurrence=recurrence)
        model = GroupRNN(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        logits, _ = model(tokens)
        loss = logits[:, :prefix].square().sum()
        first = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
        second = torch.autograd.grad(loss, list(model.parameters()))
        return first, second

    fused_first, fused_second = run("fused")
    plain, _ = run("loop")
    for got, again, expected in zip(fused_first, fused_second, plain):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(again, expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("fields, error, match", [
    ({"recurrence": "unrolled"}, ValueError, "unknown recurrence"),
    ({"recurrence": "scan"}, ValueError, "recurrent=False"),
    ({"recurrence": "scan", "recurrent": False, "reproject_every": 2}, ValueError, "reproject_every=None"),
    ({"keep_state_every": 0}, ValueError, "keep_state_every must be at least 1"),
    ({"keep_state_every": 2.0}, TypeError, "keep_state_every must be an int"),
    ({"keep_state_every": 2, "recurrence": "loop"}, ValueError, "only applies to recurrence='fused'"),
    ({"keep_state_every": 2, "group": "GL"}, ValueError, "compact group"),
    ({"truncate_every": 0}, ValueError, "truncate_every must be at least 1"),
    ({"truncate_every": True}, TypeError, "truncate_every must be an int"),
    ({"truncate_every": 2, "recurrence": "scan", "recurrent": False}, ValueError, "not 'scan'"),
])
def test_recurrence_options_are_validated(fields, error, match):
    with pytest.raises(error, match=match):
        GroupRNNConfig(vocab_size=5, **fields)


def test_fused_is_the_default():
    assert GroupRNNConfig(vocab_size=5).recurrence == "fused"
