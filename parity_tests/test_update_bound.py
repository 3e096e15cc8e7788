"""``GroupRNNConfig.update_bound`` θ: every coordinate of an update is bounded, m ← θ·tanh(m/θ).

On T and BO(2) the updates commute, so the state after t input-driven steps from H_0 = I has a closed
form: the rotation angles Σ_s φ_s, with φ_s = θ·tanh(d_s/θ) on T and θ·tanh(d_s/θ)/√2 on BO(2)
(the basis (E_ij − E_ji)/√2), for drives d_s = W x_s + b. Both trees are checked against it with
drives large enough that most coordinates saturate. The recurrences and gradients with the bound are
in ``test_recurrence`` (fused vs loop, packed vs dense), ``test_model_parity`` and ``test_gradients``.
"""

import json
import math

import numpy as np
import pytest
import torch

from experiments import train
from experiments.training import loop
from experiments.training.config import build_config, command_line
from manifold_impl.group_rnn import GroupRNNLayer as TorchGroupRNNLayer
from parity_tests.harness import to_torch
from reference.config import GroupRNNConfig
from reference.group_rnn import GroupRNNLayer
from reference.params import init_params

INPUTS, LENGTH, BATCH = 3, 4, 2


def _final_states(group, n, block, theta):
    """(drives d_s ``[T, B, dim]``, {tree: final state H_T ``[B, n, n]``}) of an input-driven layer
    at its init (H_0 = I), fed inputs 20 times larger than unit scale."""
    layer = GroupRNNLayer(INPUTS, group, n, block=block, recurrent=False, update_bound=theta)
    params = init_params(layer.param_spec(), np.random.default_rng(0))
    inputs = 20 * np.random.default_rng(1).standard_normal((LENGTH, BATCH, INPUTS))
    twin = TorchGroupRNNLayer(INPUTS, group, n, block=block, recurrent=False, update_bound=theta,
                              dtype=torch.float64)
    twin.load_state_dict(to_torch(params, torch.float64, "cpu"))
    drives = inputs @ params["cell.input_map.weight"].T + params["cell.input_map.bias"]
    return drives, {"reference": layer.forward(params, inputs)[1],
                    "torch": twin(torch.from_numpy(inputs))[1].detach().numpy()}


def test_torus_angles_are_the_sums_of_the_bounded_drives():
    theta = 0.7
    drives, finals = _final_states("T", 5, None, theta)
    assert np.mean(np.abs(drives) > 2 * theta) > 0.5  # the bound acts: most steps saturate
    angles = (theta * np.tanh(drives / theta)).sum(axis=0)  # [B, n]
    expected = np.stack([np.diag(row) for row in np.exp(1j * angles)])
    for tree, final in finals.items():
        np.testing.assert_allclose(final, expected, atol=1e-12, err_msg=tree)


def test_block_rotation_angles_are_the_bounded_drives_over_root_two():
    """θ = π√2 keeps every step's rotation angle of BO(2) inside (−π, π), as the config says."""
    theta = math.pi * math.sqrt(2)
    drives, finals = _final_states("BO", 6, 2, theta)
    steps = theta * np.tanh(drives / theta) / np.sqrt(2)  # [T, B, 3]: one angle per block
    assert np.abs(drives / np.sqrt(2)).max() > math.pi > np.abs(steps).max()
    angles = steps.sum(axis=0)
    blocks = np.stack([np.cos(angles), np.sin(angles), -np.sin(angles), np.cos(angles)], axis=-1)
    expected = np.zeros((BATCH, 6, 6))
    for k in range(3):
        expected[:, 2 * k:2 * k + 2, 2 * k:2 * k + 2] = blocks[:, k].reshape(BATCH, 2, 2)
    for tree, final in finals.items():
        np.testing.assert_allclose(final, expected, atol=1e-12, err_msg=tree)


@pytest.mark.parametrize("bound, error", [(0.0, ValueError), (-1.0, ValueError), (math.nan, ValueError),
                                          (math.inf, ValueError), ("3", TypeError), (True, TypeError)])
def test_config_refuses(bound, error):
    with pytest.raises(error, match="update_bound"):
        GroupRNNConfig(vocab_size=3, update_bound=bound)


def test_training_smoke_run_from_the_command_line_options(tmp_path):
    options = train.parse_options("group_rnn", "count", [
        "--modulus", "2", "--group", "T", "--n", "3", "--embedding-dim", "4", "--update-bound", "3.14",
        "--steps", "2", "--batch", "2", "--eval-every", "2", "--eval-sequences", "2", "--eval-max-length", "128"])
    assert options["update_bound"] == 3.14
    config = build_config("group_rnn", "count", options)
    assert "--update-bound" in command_line(config, tmp_path)
    loop.run(config, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"]["update_bound"] == 3.14
    assert 0 <= json.loads((tmp_path / "run" / "final.json").read_text())["test_accuracy@128"] <= 1
