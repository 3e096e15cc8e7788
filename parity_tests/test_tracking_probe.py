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
