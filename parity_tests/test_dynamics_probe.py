"""The large-n divergence probe trains through ``experiments.train``'s loop: watching a run changes
none of its parameters, and each arm's fix reaches the model and its optimizers."""

import pytest
import torch

from experiments.studies.large_n_divergence import dynamics_probe as probe
from experiments.training.loop import Run

BASE = probe.Arm(n=4, embedding_dim=5, lr=1e-2)


def _runs(tmp_path, arm, steps=3, every=2):
    config = probe.run_config(arm, steps, batch=2, length=8, eval_tokens=16)
    for name in ("probe", "plain"):
        (tmp_path / name).mkdir()
    return probe.ProbeRun(tmp_path / "probe", config, arm, every), Run(tmp_path / "plain", config)


def test_the_probe_trains_the_parameters_a_plain_run_of_its_configuration_trains(tmp_path):
    watched, plain = _runs(tmp_path, BASE)
    watched.evaluate("valid")
    watched.fit()
    plain.fit()
    for (name, got), expected in zip(watched.model.state_dict().items(), plain.model.state_dict().values()):
        assert torch.equal(got, expected), name
    assert [row["step"] for row in watched.per_step] == [0, 1, 2]
    assert [record["step"] for record in watched.records] == [0, 2]
    assert [e["step"] for e in watched.evals] == [0, 3]
    first = watched.per_step[0]
    assert first["entry_step_W"] == pytest.approx(1.0, abs=0.05)  # Adam's first step: lr·sign(g) per entry
    for record in watched.records:  # Re tr(HᵀH')/n of two orthogonal matrices: in [−1, 1]
        assert -1 - 1e-5 <= record["similarity_1"] <= 1 + 1e-5


def test_an_arm_with_map_rates_trains_w_and_u_at_them_and_everything_else_at_lr(tmp_path):
    watched, _ = _runs(tmp_path, probe.Arm(n=4, embedding_dim=5, lr=1e-2, lr_maps=0.1))
    groups = watched.optimizers.optimizers[0].param_groups
    assert [g["lr"] for g in groups] == pytest.approx([1e-2, 1e-3, 1e-3], rel=1e-12)
    assert {id(groups[1]["params"][0]), id(groups[2]["params"][0])} == \
        {id(watched.model.cell.input_map.weight), id(watched.model.cell.state_map.weight)}
    watched.fit()
    assert watched.per_step[0]["entry_step_W"] == pytest.approx(1.0, abs=0.05)  # relative to its own rate


def test_a_bounded_arm_applies_steps_of_spectral_norm_below_its_bound(tmp_path):
    arm = probe.Arm(n=4, embedding_dim=5, lr=1e-2, bound=("spectral", 0.05))
    watched, _ = _runs(tmp_path, arm, steps=2, every=1)
    assert isinstance(watched.model.cell.mixing, probe.BoundedStep)
    watched.fit()
    for record in watched.records:
        assert record["spectral_max"] <= 0.05 * (1 + 1e-5) < record["spectral_raw_max"]
