"""The helpers of ``experiments.studies.state_tracking.so2_parity_probe``, against hand-worked values."""

import math

import numpy as np
import pytest
import torch

from experiments.studies.state_tracking import so2_parity_probe as probe
from experiments.models import build_model


def test_position_weights_are_the_training_distribution():
    """Lengths uniform in 2..40: a scored position sits at mean t = E[(L + 1)/2] = 11, k = t/2 = 5.5."""
    weights = probe.position_weights()
    counts = np.arange(probe.MAX_LENGTH + 1)
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert weights.sum(1) @ counts == pytest.approx(11.0, abs=1e-12)
    assert weights.sum(0) @ counts == pytest.approx(5.5, abs=1e-12)
    assert weights[0].sum() == 0 and np.all(np.triu(weights, 1)[1:] == 0)  # k ≤ t


def test_losses_at_the_exact_solution():
    """θ = (0, π): every margin is κ, so the fixed readout's loss is ln(1 + e^−5) = 0.0067153."""
    weights = probe.position_weights()
    assert probe.fixed_readout_loss(0.0, math.pi, weights) == pytest.approx(0.0067153484, abs=1e-9)
    assert probe.profile_loss(0.0, math.pi, weights) < 1e-3
    assert probe.profile_loss(0.0, 0.0, weights) == pytest.approx(math.log(2), abs=1e-6)  # a constant state


@pytest.mark.parametrize("angles", [(0.0, math.pi), (0.3, -2.0), (-1.0, 2.5)])
def test_set_token_angles_round_trip(angles):
    model = build_model(probe.so2_config(), generator=torch.Generator().manual_seed(0))
    probe.set_token_angles(model, angles)
    # equal modulo 2π: a rotation by float32(π) may read back as −π
    np.testing.assert_allclose(probe.wrap(probe.token_angles(model) - np.asarray(angles)), 0.0, atol=1e-6)


def test_wrap():
    np.testing.assert_allclose(probe.wrap([0.5, 4.0, -4.0, math.pi, -math.pi]),
                               [0.5, 4.0 - 2 * math.pi, 2 * math.pi - 4.0, math.pi, math.pi])


def test_the_probe_trains_through_the_training_loop_and_keeps_its_angles(tmp_path):
    """An ``AngleRun`` trains the parameters a plain ``Run`` of its configuration trains; its path starts
    at the angles ``prepare`` set and has one entry per step after them."""
    from experiments.training.loop import Run

    config = probe.run_config(probe.so2_config(), seed=1, steps=4, batch=8, ramp=3)
    (tmp_path / "watched").mkdir()
    (tmp_path / "plain").mkdir()
    watched = probe.AngleRun(tmp_path / "watched", config, lambda model, seed: probe.set_token_angles(model, [0.0, 2.5]))
    plain = Run(tmp_path / "plain", config)
    probe.set_token_angles(plain.model, [0.0, 2.5])
    watched.fit()
    plain.fit()
    for (name, got), expected in zip(watched.model.state_dict().items(), plain.model.state_dict().values()):
        assert torch.equal(got, expected), name
    assert len(watched.losses) == 4 and len(watched.path) == 5
    np.testing.assert_allclose(probe.wrap(watched.path[0] - np.array([0.0, 2.5])), 0.0, atol=1e-6)
    np.testing.assert_array_equal(watched.path[-1], probe.token_angles(watched.model))
    assert not np.array_equal(watched.path[0], watched.path[-1])  # it did train
