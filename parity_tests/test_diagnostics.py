"""Training-dynamics diagnostics (experiments/analysis/diagnostics.py) against closed forms and by hand."""

import json
import math

import numpy as np
import pytest
import torch

from experiments import train
from experiments.baselines import LSTMConfig
from experiments.analysis.diagnostics import LAGS, dynamics, gradient_norms, parameter_groups
from experiments.models import build_model
from reference.config import GroupRNNConfig


def _hand_set_o2(thetas, bias, alpha, gamma):
    """An O(2) RNN whose drive is c_t = θ[x_t] + b + α·(H_{t−1}[0,0] + H_{t−1}[1,1]), mixed by γ."""
    vocab = len(thetas)
    config = GroupRNNConfig(vocab_size=vocab, group="O", n=2, embedding_dim=vocab, mixing="scalar")
    model = build_model(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.embedding.weight.copy_(torch.eye(vocab))
        model.cell.input_map.weight.copy_(torch.tensor([thetas], dtype=torch.float64))
        model.cell.input_map.bias.fill_(bias)
        model.cell.state_map.weight.copy_(torch.tensor([[alpha, 0.0, 0.0, alpha]], dtype=torch.float64))
        model.cell.mixing.step_size.fill_(gamma)
    return model


def _angles_by_hand(tokens, thetas, bias, alpha, gamma):
    """Per sequence: drives d_t, state terms s_t and step angles ω_t of the planar rotation.

    The algebra basis is orthonormal in Frobenius norm (docs/design.md, Groups), so for n = 2, hat(c) has the
    entries ±c/√2 and exp(hat(c)) turns the plane by the angle c/√2 (one sign for every step, so
    the angle between H_t and H_{t+k} is |Σ ω| either way). H_{t−1}'s diagonal is cos φ_{t−1} twice.
    """
    drives, states, angles = [], [], []
    for sequence in tokens:
        phi, d_row, s_row, w_row = 0.0, [], [], []
        for token in sequence:
            d, s = thetas[token] + bias, 2 * alpha * math.cos(phi)
            omega = gamma * (d + s) / math.sqrt(2)
            phi += omega
            d_row.append(d), s_row.append(s), w_row.append(omega)
        drives.append(d_row), states.append(s_row), angles.append(w_row)
    return np.array(drives), np.array(states), np.array(angles)


def test_dynamics_of_a_hand_set_o2_rnn_match_the_planar_rotation():
    thetas, bias, alpha, gamma = [0.3, -1.1, 2.0], 0.15, 0.4, 0.7
    model = _hand_set_o2(thetas, bias, alpha, gamma)
    tokens = torch.from_numpy(np.random.default_rng(3).integers(0, 3, size=(4, 17)))
    got = dynamics(model, tokens)
    d, s, omega = _angles_by_hand(tokens.tolist(), thetas, bias, alpha, gamma)
    assert got["dyn_rotation_mean"] == pytest.approx(np.abs(omega).mean(), rel=1e-12)
    assert got["dyn_rotation_max"] == pytest.approx(np.abs(omega).max(), rel=1e-12)
    assert got["dyn_input_norm"] == pytest.approx(np.abs(d).mean(), rel=1e-12)
    assert got["dyn_state_norm"] == pytest.approx(np.abs(s).mean(), rel=1e-12)
    assert got["dyn_drive_norm"] == pytest.approx(np.abs(d + s).mean(), rel=1e-12)
    cumulative = np.cumsum(omega, axis=1)
    for lag in LAGS:
        expected = np.cos(cumulative[:, lag:] - cumulative[:, :-lag]).mean()
        assert got[f"dyn_similarity@{lag}"] == pytest.approx(expected, rel=1e-10, abs=1e-12)
    readout = model.readout.weight.detach().numpy()
    assert got["dyn_readout_norm"] == pytest.approx(np.sqrt((readout ** 2).sum()), rel=1e-12)


def test_a_constant_rotation_has_similarity_cos_k_theta():
    """One token, no state term: every step turns by θ = c/√2, so Re tr(H_tᵀH_{t+k})/2 = cos(kθ)."""
    model = _hand_set_o2([0.5], 0.0, 0.0, 1.0)
    got = dynamics(model, torch.zeros(2, 12, dtype=torch.long))
    theta = 0.5 / math.sqrt(2)
    assert got["dyn_rotation_max"] == pytest.approx(theta, rel=1e-12)
    for lag in LAGS:
        assert got[f"dyn_similarity@{lag}"] == pytest.approx(math.cos(lag * theta), rel=1e-12)


@pytest.mark.parametrize("model_config", [
    GroupRNNConfig(vocab_size=7, group="U", n=3, embedding_dim=4, mixing="lowrank", mixing_rank=2),
    GroupRNNConfig(vocab_size=7, group="O", n=3, embedding_dim=4, num_layers=2, recurrence="loop", forget="gate",
                   forget_alpha=0.3),
    LSTMConfig(vocab_size=7, hidden_size=5)], ids=["group_rnn", "two_layers_forget", "lstm"])
def test_gradient_norms_cover_every_parameter_once(model_config):
    model = build_model(model_config, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    logits, _ = model(torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(2)))
    logits.square().sum().backward()
    groups = parameter_groups(model)
    ids = [id(p) for parameters in groups.values() for p in parameters]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())
    norms = gradient_norms(model)
    for name, parameters in groups.items():
        by_hand = math.sqrt(sum(float((p.grad.abs() ** 2).sum()) for p in parameters))
        assert norms[f"grad_norm_{name}"] == pytest.approx(by_hand, rel=1e-12)
    every = math.sqrt(sum(float((p.grad.abs() ** 2).sum()) for p in model.parameters()))
    assert norms["grad_norm"] == pytest.approx(every, rel=1e-12)
    if isinstance(model_config, GroupRNNConfig) and model_config.num_layers == 1:
        assert set(groups) == {"embedding", "input_map", "state_map", "mixing", "readout", "initial_state"}
    elif isinstance(model_config, GroupRNNConfig):
        cell = {"input_map", "state_map", "forget_gate", "initial_state"}  # no mixing: it has no parameters
        assert set(groups) == {"embedding", "readout"} | cell | {name + "_l1" for name in cell}
        assert set(dynamics(model, torch.zeros(2, 12, dtype=torch.long))) >= {"dyn_rotation_mean", "dyn_similarity@10"}
    else:
        assert dynamics(model, torch.zeros(1, 3, dtype=torch.long)) == {}


def test_a_short_group_rnn_run_records_finite_diagnostics(tmp_path):
    common = ["--dataset", "ptb_char", "--steps", "4", "--batch", "2", "--length", "12", "--eval-every", "2",
              "--eval-tokens", "100", "--carried-streams", "0"]
    train.main(["--model", "group_rnn", "--group", "O", "--n", "3", "--embedding-dim", "4", *common,
                "--run-dir", str(tmp_path / "rnn")])
    train.main(["--model", "lstm", "--hidden-size", "4", *common, "--run-dir", str(tmp_path / "lstm")])
    expected = {"dyn_rotation_mean", "dyn_rotation_max", "dyn_drive_norm", "dyn_input_norm", "dyn_state_norm",
                "dyn_similarity@1", "dyn_similarity@10", "dyn_readout_norm", "grad_norm", "grad_norm_embedding",
                "grad_norm_input_map", "grad_norm_state_map", "grad_norm_readout", "grad_norm_initial_state"}
    for name in ("rnn", "lstm"):
        records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == [2, 4]
        for record in records:
            if name == "rnn":
                assert expected <= set(record)
            else:
                assert not any(key.startswith("dyn_") for key in record) and "grad_norm" in record
            assert all(math.isfinite(v) for k, v in record.items() if k.startswith(("dyn_", "grad_norm")))


def test_a_diverged_model_gets_nan_dynamics_with_every_key():
    model = _hand_set_o2([0.3, -1.1, 2.0], 0.15, 0.4, 0.7)
    finite = dynamics(model, torch.zeros(2, 12, dtype=torch.long))
    with torch.no_grad():
        model.cell.input_map.weight.fill_(float("inf"))  # what a diverged run leaves
    got = dynamics(model, torch.zeros(2, 12, dtype=torch.long))
    assert set(got) == set(finite) and all(math.isnan(value) for value in got.values())
