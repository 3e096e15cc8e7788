"""Stacked group RNN layers (GroupRNNConfig.num_layers): the config, parity of both trees on every
group and recurrence, gradients against finite differences, the wiring of the stack against the
one-layer cell run layer by layer, the scale of the upper layers' drive, and the layer's states."""

import numpy as np
import pytest
import torch

from manifold_impl import GroupRNN, GroupRNNLayer
from parity_tests.harness import parity, to_torch
from parity_tests.test_gradients import assert_model_gradients_match_finite_differences
from reference.config import GROUP_NAMES, GroupRNNConfig, layer_prefixes
from reference.group_rnn import GroupRNN as ReferenceGroupRNN
from reference.group_rnn import GroupRNNLayer as ReferenceGroupRNNLayer
from reference.params import random_params, sub_params


def config(group="O", layers=2, **fields):
    return GroupRNNConfig(**{"vocab_size": 7, "group": group, "n": 4, "embedding_dim": 5, "num_layers": layers,
                             **({"block": 2} if group == "BO" else {}), **fields})


@pytest.mark.parametrize("layers, error", [(0, ValueError), (True, TypeError), (1.0, TypeError)])
def test_the_config_refuses_a_layer_count_that_is_not_a_positive_int(layers, error):
    with pytest.raises(error, match="num_layers"):
        config(layers=layers)


def test_one_layer_keeps_the_keys_and_shapes_of_the_model_without_depth():
    assert layer_prefixes(config(layers=1)) == ["cell."]
    assert layer_prefixes(config(layers=3)) == ["cell.", "cell_l1.", "cell_l2."]
    assert list(ReferenceGroupRNN(config(layers=1)).param_spec()) == list(ReferenceGroupRNN(
        GroupRNNConfig(vocab_size=7, group="O", n=4, embedding_dim=5)).param_spec())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("group", GROUP_NAMES)
def test_parity_of_two_layers_fused(group, dtype):
    report = parity(config(group), seed=1, dtype=dtype, batch=2, length=5)
    assert report["pass"], report


@pytest.mark.parametrize("fields", [
    {"recurrence": "loop"},
    {"recurrence": "scan", "recurrent": False},
    {"recurrence": "fused", "keep_state_every": 2},
    {"recurrence": "loop", "forget": "gate", "forget_alpha": 0.3},
    {"recurrence": "fused", "mixing": "lowrank", "mixing_rank": 2, "update_bound": 2.0, "input_init": "spread"},
], ids=["loop", "scan", "keep_state_every", "forget", "options"])
@pytest.mark.parametrize("group", ["O", "T"])
def test_parity_of_three_layers_with_each_recurrence_and_option(group, fields):
    for dtype in ("float64", "float32"):
        report = parity(config(group, layers=3, **fields), seed=2, dtype=dtype, batch=2, length=4)
        assert report["pass"], (dtype, report)


@pytest.mark.parametrize("fields", [{}, {"recurrence": "loop", "forget": "gate", "forget_alpha": 0.3}],
                         ids=["plain", "forget"])
@pytest.mark.parametrize("group", ["O", "U", "T", "BO"])
def test_reference_gradients_of_two_layers_match_finite_differences(group, fields):
    assert_model_gradients_match_finite_differences(ReferenceGroupRNN(config(group, **fields)), np.random.default_rng(3))


@pytest.mark.parametrize("group", ["O", "SU", "T"])
def test_the_stack_is_the_one_layer_cell_run_on_the_features_of_the_layer_below(group):
    """Layer by layer with one-layer ``GroupRNNLayer``s: the first on the embeddings, the second on
    the first's outputs features(H_t¹); the model's states are theirs and its logits read the top."""
    model = ReferenceGroupRNN(config(group))
    params = random_params(model.param_spec(), np.random.default_rng(4))
    tokens = np.random.default_rng(5).integers(0, 7, size=(2, 6))
    logits, cache = model.forward(params, tokens)

    bottom = ReferenceGroupRNNLayer(5, group, 4, batch_first=True, **({"block": 2} if group == "BO" else {}))
    bottom_params = {key: value for key, value in params.items() if key.startswith("cell.")}
    features, first = bottom.forward(bottom_params, params["embedding.weight"][tokens])
    top = ReferenceGroupRNNLayer(bottom.output_size, group, 4, batch_first=True)
    top_params = {"cell." + key: value for key, value in sub_params(params, "cell_l1.").items()}
    _, second = top.forward(top_params, features)
    assert cache.state.shape == (2, 2, 4, 4)
    np.testing.assert_allclose(cache.state[0], first, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cache.state[1], second, rtol=0, atol=1e-12)
    top_states = cache.states[1]  # [B, T, n, n]
    np.testing.assert_allclose(top_states[:, -1], second, rtol=0, atol=1e-12)
    expected_logits = model.readout(sub_params(params, "readout."), top_states)
    np.testing.assert_allclose(logits, expected_logits, rtol=0, atol=1e-12)


@pytest.mark.parametrize("group", ["O", "U", "BO"])
def test_the_upper_layers_start_with_a_drive_of_unit_size_as_the_first(group):
    """E‖W x‖² = 1 at init for the first layer's N(0, 1) embeddings and for the upper layers'
    features(H) of a state on the group (‖features(H)‖² = n): averaged over 400 draws of W."""
    sizes = []
    for seed in range(400):
        model = GroupRNN(config(group, n=6, embedding_dim=8, **({"block": 3} if group == "BO" else {})),
                         dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        features = model.group.features(model.group.random(generator=torch.Generator().manual_seed(seed)))
        sizes.append(model.cell_l1.input_map.weight.detach() @ features.to(torch.float64))
    mean_square = torch.stack(sizes).square().sum(-1).mean().item()
    assert 0.85 < mean_square < 1.15


def test_the_layer_takes_and_returns_every_layers_state():
    layer = GroupRNNLayer(3, "SO", 4, num_layers=2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    reference = ReferenceGroupRNNLayer(3, "SO", 4, num_layers=2)
    assert list(layer.state_dict()) == list(reference.param_spec())
    params = {key: value.detach().numpy() for key, value in layer.state_dict().items()}
    inputs = torch.randn(5, 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    output, state = layer(inputs)
    assert output.shape == (5, 2, layer.output_size) and state.shape == (2, 2, 4, 4)
    expected, expected_state = reference.forward(params, inputs.numpy())
    np.testing.assert_allclose(output.detach().numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state.detach().numpy(), expected_state, rtol=0, atol=1e-12)

    whole, _ = layer(torch.cat([inputs, inputs]))
    continued, _ = layer(inputs, state)  # the returned state continues the sequence
    torch.testing.assert_close(continued, whole[5:], rtol=0, atol=1e-12)
    single, single_state = layer(inputs[:, 0], state[:, 0])  # unbatched: [T, F] and [L, n, n]
    assert single_state.shape == (2, 4, 4)
    torch.testing.assert_close(single, continued[:, 0], rtol=0, atol=1e-12)

    with pytest.raises(ValueError, match=r"state must have shape \(2, 2, 4, 4\)"):
        layer(inputs, state[0])
    assert "num_layers=2" in repr(layer)


def test_a_stacked_model_loads_into_the_torch_tree_with_the_reference_keys():
    reference = ReferenceGroupRNN(config("U", layers=3))
    params = random_params(reference.param_spec(), np.random.default_rng(6))
    model = GroupRNN(config("U", layers=3), dtype=torch.float64)
    assert [cell for cell in model.cells] == [model.cell, model.cell_l1, model.cell_l2]
    model.load_state_dict(to_torch(params, torch.float64, "cpu"))
    tokens = np.random.default_rng(7).integers(0, 7, size=(2, 4))
    np.testing.assert_allclose(model(torch.from_numpy(tokens))[0].detach().numpy(),
                               reference.forward(params, tokens)[0], rtol=0, atol=1e-12)
