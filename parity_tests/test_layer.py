"""GroupRNNLayer: nn.LSTM's conventions, parity with the reference layer, and the README example."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from manifold_impl import GroupRNNLayer
from manifold_impl.groups import get_group
from parity_tests.harness import to_torch
from reference.config import GROUP_NAMES
from reference.group_rnn import GroupRNNLayer as ReferenceGroupRNNLayer
from reference.params import random_params

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_example_runs_and_keeps_the_state_on_the_group():
    text = README.read_text()
    match = re.search(r"<!-- layer-example -->\n```python\n(.*?)```", text, re.DOTALL)
    assert match, "README lost its layer example"
    namespace = {}
    exec(compile(match.group(1), str(README), "exec"), namespace)
    logits, state, model = namespace["logits"], namespace["state"], namespace["model"]
    assert logits.shape == (4, 6, 5) and state.shape == (4, 8, 8)
    group = get_group("SO", 8)
    assert group.is_member(state.detach(), atol=1e-5)
    assert group.is_member(model.rnn.cell.initial_state.detach(), atol=1e-5)  # trained, still on SO(8)


@pytest.mark.parametrize("group", GROUP_NAMES)
def test_layer_equals_the_reference_layer(group):
    options = {"mixing": "lowrank", "mixing_rank": 2, "reproject_every": 2}
    reference = ReferenceGroupRNNLayer(3, group, 4, batch_first=True, **options)
    rng = np.random.default_rng(0)
    params = random_params(reference.param_spec(), rng)
    layer = GroupRNNLayer(3, group, 4, batch_first=True, dtype=torch.float64, **options)
    assert list(layer.state_dict()) == list(params)
    layer.load_state_dict(to_torch(params, torch.float64, "cpu"))
    inputs = rng.standard_normal((2, 5, 3))
    expected, expected_state = reference.forward(params, inputs)
    output, state = layer(torch.from_numpy(inputs))
    assert output.shape == (2, 5, layer.output_size) == expected.shape
    np.testing.assert_allclose(output.detach().numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state.detach().numpy(), expected_state, rtol=0, atol=1e-12)


def test_layer_follows_the_lstm_conventions():
    layer = GroupRNNLayer(3, "U", 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    inputs = torch.randn(7, 2, 3, dtype=torch.float64)  # [T, B, F]
    output, state = layer(inputs)
    assert output.shape == (7, 2, 18) and state.shape == (2, 3, 3) and state.is_complex()
    torch.testing.assert_close(output[-1], layer.cell.features(state))
    batch_first = GroupRNNLayer(3, "U", 3, batch_first=True, dtype=torch.float64)
    batch_first.load_state_dict(layer.state_dict())
    torch.testing.assert_close(batch_first(inputs.transpose(0, 1))[0], output.transpose(0, 1), rtol=0, atol=0)
    # a sequence in two pieces, the second from the first one's final state, is the sequence whole
    first, middle = layer(inputs[:4])
    second, end = layer(inputs[4:], middle)
    torch.testing.assert_close(torch.cat([first, second]), output, rtol=0, atol=1e-13)
    torch.testing.assert_close(end, state, rtol=0, atol=1e-13)
    unbatched, unbatched_state = layer(inputs[:, 1])  # [T, F]
    torch.testing.assert_close(unbatched, output[:, 1], rtol=0, atol=1e-13)
    torch.testing.assert_close(unbatched_state, state[1], rtol=0, atol=1e-13)


@pytest.mark.parametrize("call, error, match", [
    (lambda layer: layer(torch.zeros(5, 2, 3)), TypeError, "torch.float64"),
    (lambda layer: layer(np.zeros((5, 2, 3))), TypeError, r"torch.Tensor, got numpy.ndarray; convert it with "
     r"torch.as_tensor\(input, dtype=torch.float64\)"),
    (lambda layer: layer(torch.zeros(5, 2, 3, dtype=torch.float64), (torch.zeros(2, 3), torch.zeros(2, 3))),
     TypeError, r"one tensor.*no LSTM-style \(h, c\) pair"),
    (lambda layer: layer(torch.zeros(5, 2, 4, dtype=torch.float64)), ValueError, "shape"),
    (lambda layer: layer(torch.zeros(5, dtype=torch.float64)), ValueError, "shape"),
    (lambda layer: layer(torch.zeros(0, 2, 3, dtype=torch.float64)), ValueError, "T, B ≥ 1"),
    (lambda layer: layer(torch.zeros(5, 2, 3, dtype=torch.float64), torch.eye(3, dtype=torch.float64).expand(3, 3, 3)),
     ValueError, "state must have shape"),
    (lambda layer: layer(torch.zeros(5, 2, 3, dtype=torch.float64), 2 * torch.eye(3, dtype=torch.float64).expand(2, 3, 3)),
     ValueError, "not unitary"),
])
def test_bad_input_is_refused(call, error, match):
    layer = GroupRNNLayer(3, "O", 3, dtype=torch.float64)
    with pytest.raises(error, match=match):
        call(layer)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unknown group"):
        GroupRNNLayer(3, "Sp", 4)
    with pytest.raises(TypeError, match="batch_first"):
        GroupRNNLayer(3, "O", 4, batch_first=1)
    with pytest.raises(ValueError, match="recurrent=False"):
        GroupRNNLayer(3, "O", 4, recurrence="scan")
    for layer in (GroupRNNLayer, ReferenceGroupRNNLayer):
        with pytest.raises(ValueError, match="input_size must be at least 1, got 0"):
            layer(0, "O", 4)


def test_layer_prints_its_group_and_options_as_nn_lstm_does():
    layer = GroupRNNLayer(3, "BO", 6, block=3, recurrent=False, batch_first=True)
    head = "3, group='BO', n=6, block=3, recurrent=False, batch_first=True"
    assert repr(layer).splitlines()[:2] == ["GroupRNNLayer(", f"  {head}"]
    assert repr(ReferenceGroupRNNLayer(3, "BO", 6, block=3, recurrent=False, batch_first=True)) == f"GroupRNNLayer({head})"
    assert repr(GroupRNNLayer(10, "SO", 6)).splitlines()[1] == "  10, group='SO', n=6"
    assert "Returns" in GroupRNNLayer.forward.__doc__ and "[T, B, F]" in GroupRNNLayer.forward.__doc__


@pytest.mark.parametrize("forget", ["constant", "gate"])
@pytest.mark.parametrize("group", ["O", "U", "T", "BO"])
def test_a_leaky_layer_equals_the_reference_layer(group, forget):
    """``forget`` and ``forget_alpha`` are the layer's options too (GroupRNNConfig.forget), fused."""
    options = {"forget": forget, "forget_alpha": 0.4, "num_layers": 2}
    reference = ReferenceGroupRNNLayer(3, group, 4, batch_first=True, **options)
    params = random_params(reference.param_spec(), np.random.default_rng(1))
    layer = GroupRNNLayer(3, group, 4, batch_first=True, dtype=torch.float64, **options)
    assert list(layer.state_dict()) == list(params)
    assert ("cell.forget_gate.weight" in params) == (forget == "gate")
    layer.load_state_dict(to_torch(params, torch.float64, "cpu"))
    inputs = np.random.default_rng(2).standard_normal((2, 5, 3))
    expected, expected_state = reference.forward(params, inputs)
    output, state = layer(torch.from_numpy(inputs))
    np.testing.assert_allclose(output.detach().numpy(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(state.detach().numpy(), expected_state, rtol=0, atol=1e-12)
    assert f"forget='{forget}', forget_alpha=0.4" in repr(layer)
