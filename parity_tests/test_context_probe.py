"""The linear context probe: what it reads is what the logits are affine in, and its accuracy."""

import json

import numpy as np
import pytest
import torch

from experiments.models import build_model
from experiments.studies.charlm_v2 import context_probe
from experiments.studies.charlm_v2.context_probe import position_bins, probe, probe_accuracy, readout_bits, readout_inputs
from experiments.training import loop
from experiments.training.config import build_config

TINY = {"dataset": "tinyshakespeare", "steps": 2, "batch": 2, "length": 16, "eval_every": 2, "eval_tokens": 64,
        "checkpoint_every": 2}


@pytest.mark.parametrize("model, options", [("group_rnn", {"group": "O", "n": 4, "embedding_dim": 5}),
                                            ("group_rnn", {"group": "T", "n": 3, "embedding_dim": 5}),
                                            ("lstm", {"hidden_size": 6}), ("exprnn", {"hidden_size": 6})])
def test_the_probe_reads_the_vector_the_logits_are_affine_in(model, options):
    config = build_config(model, "lm", {**TINY, **options}).model
    network = build_model(config, dtype=torch.float64)
    tokens = torch.randint(0, config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    features = readout_inputs(network, tokens)[0].reshape(60, -1).numpy()
    logits = network(tokens)[0].reshape(60, -1).detach().numpy()
    design = np.hstack([features, np.ones((60, 1))])  # fewer columns than the 60 rows
    fitted = design @ np.linalg.lstsq(design, logits, rcond=None)[0]
    assert np.abs(fitted - logits).max() < 1e-9


def test_a_readout_probe_learns_a_nonlinear_target_only_with_its_hidden_layer():
    generator = np.random.default_rng(1)
    features = generator.normal(size=(6000, 2))
    targets = (features[:, 0] * features[:, 1] > 0).astype(int)  # XOR of the signs: no linear readout can
    train, valid = (features[:5000], targets[:5000]), (features[5000:], targets[5000:])
    assert readout_bits(train, valid, 2, None, steps=600) > 0.95  # about 1 bit: chance
    assert readout_bits(train, valid, 2, 32, steps=600) < 0.4


def test_the_probe_accuracy_is_one_for_an_encoded_target_and_chance_for_noise():
    generator = np.random.default_rng(0)
    targets = generator.integers(0, 5, size=4000)
    encoded = np.eye(5)[targets] + 0.1 * generator.normal(size=(4000, 5))
    assert probe_accuracy(np.hstack([encoded, generator.normal(size=(4000, 3))]), targets, 5) == 1.0
    assert abs(probe_accuracy(generator.normal(size=(4000, 8)), targets, 5) - 0.2) < 0.04
    with pytest.raises(ValueError, match=r"\[N, D\]"):
        probe_accuracy(np.zeros((4, 2)), np.zeros(3, dtype=int), 5)


def test_the_probe_runs_on_finished_runs_and_writes_its_record(tmp_path):
    for name, model, options in (("rnn-O-seed0", "group_rnn", {"group": "O", "n": 4, "embedding_dim": 5}),
                                 ("lstm-seed0", "lstm", {"hidden_size": 6})):
        loop.run(build_config(model, "lm", {**TINY, **options}), tmp_path / name)
    sizes = {"windows": 16, "length": 24, "burn_in": 8, "readout_windows": 32, "steps": 30}
    record = probe([tmp_path / "rnn-O-seed0", tmp_path / "lstm-seed0"], tmp_path / "probe", **sizes)
    saved = json.loads((tmp_path / "probe" / "context_probe.json").read_text())
    assert saved["runs"].keys() == {"rnn-O-seed0", "lstm-seed0"} and record["runs"]["lstm-seed0"]["arm"] == "lstm"
    assert saved["length"] == 24 and saved["steps"] == 30
    for run in saved["runs"].values():
        assert len(run["accuracy"]) == saved["lags"] and all(0 <= a <= 1 for a in run["accuracy"])
        assert len(run["by_position"]) == 24 and run["bits"].keys() == {"model", "linear", "mlp"}
        # the mean of the positions the readouts are scored on is the model's own score there
        assert np.mean(run["by_position"][8:]) == pytest.approx(run["bits"]["model"], rel=1e-12)
        assert run["dropped"] == {"valid": 0, "train": 0}
    assert 0.1 < saved["majority"] < 0.3  # the space is Tiny Shakespeare's most frequent character
    assert (tmp_path / "probe" / "context_probe.png").stat().st_size > 0
    with pytest.raises(ValueError, match="not: .*missing"):  # refused before any work
        probe([tmp_path / "lstm-seed0", tmp_path / "missing"], tmp_path / "probe")


def test_positions_are_averaged_over_doubling_bins():
    assert position_bins(np.arange(10.0)) == ([0, 1, 2, 4, 8], [0.0, 1.0, 2.5, 5.5, 8.5])


def test_windows_on_which_the_model_is_not_finite_are_dropped_and_counted(monkeypatch):
    network = build_model(build_config("lstm", "lm", {**TINY, "hidden_size": 6}).model, dtype=torch.float64)

    def runs_away_after_a_zero(model, tokens):  # as a GL state does on a few windows
        features, logits = readout_inputs(model, tokens)
        broken = (tokens == 0).cumsum(1) > 0
        return features.masked_fill(broken[..., None], float("nan")), logits
    monkeypatch.setattr(context_probe, "readout_inputs", runs_away_after_a_zero)
    stream = np.random.default_rng(0).integers(1, 5, size=400)
    stream[[50, 51, 300]] = 0
    features, tokens, following, bits, dropped = context_probe._windows(network, stream, 40, 16, 0, 4)
    starts = np.random.default_rng(0).integers(0, len(stream) - 17, size=40)  # the windows _windows draws
    touched = np.array([(stream[s:s + 16] == 0).any() for s in starts])
    assert dropped == touched.sum() > 0
    assert features.shape == (40 - dropped, 12, 6) and np.isfinite(features).all() and np.isfinite(bits).all()
    assert (tokens == np.stack([stream[s:s + 16] for s in starts[~touched]])).all()
    assert (following == np.stack([stream[s + 5:s + 17] for s in starts[~touched]])).all()


def test_a_readout_of_features_that_are_not_finite_is_refused():
    features = np.full((200, 3), np.nan)
    with pytest.raises(ValueError, match="never finite"):
        readout_bits((features, np.zeros(200, dtype=int)), (features, np.zeros(200, dtype=int)), 2, None, steps=5)
