"""The state spectrum: singular values of the group RNN's state along a stream."""

import json
import math

import numpy as np
import pytest
import torch

from experiments.studies.charlm_v2.state_spectrum import RANK_TOLERANCE, measure, spectrum, trace_blowup
from experiments.training import loop
from experiments.training.config import build_config
from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from parity_tests.harness import to_torch
from reference.config import GroupRNNConfig
from reference.group_rnn import GroupRNN
from reference.params import init_params


def test_the_spectrum_of_a_gl_state_equals_numpys_svd_of_the_reference_states():
    config = GroupRNNConfig(vocab_size=7, group="GL", n=4, embedding_dim=5)
    reference = GroupRNN(config)
    params = init_params(reference.param_spec(), np.random.default_rng(3))
    params["cell.input_map.weight"] = 3.0 * params["cell.input_map.weight"]  # a drive large enough to move σ apart
    model = TorchGroupRNN(config, dtype=torch.float64)
    model.load_state_dict(to_torch(params, torch.float64, "cpu"))
    tokens = np.random.default_rng(4).integers(0, 7, size=(5, 12))
    sigma = np.linalg.svd(reference.forward(params, tokens)[1].states, compute_uv=False)  # [5, 12, 4]
    got = spectrum(model, torch.from_numpy(tokens))
    expected = {"frobenius": np.sqrt((sigma ** 2).sum(-1) / 4), "sigma_max": sigma[..., 0], "sigma_min": sigma[..., -1],
                "inverse_condition": sigma[..., -1] / sigma[..., 0],
                "rank": (sigma > RANK_TOLERANCE * sigma[..., :1]).sum(-1)}
    for key, values in expected.items():
        np.testing.assert_allclose(got[key], np.median(values, axis=0), rtol=1e-9, err_msg=key)
    assert min(got["inverse_condition"]) < 0.5  # the GL state is not orthogonal: the check can tell


@pytest.mark.parametrize("group, options", [("O", {"n": 4}), ("U", {"n": 3}), ("T", {"n": 3}),
                                            ("BO", {"n": 4, "block": 2})])
def test_a_compact_state_has_every_singular_value_one(group, options):
    config = GroupRNNConfig(vocab_size=7, group=group, embedding_dim=5, **options)
    model = TorchGroupRNN(config, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = spectrum(model, torch.randint(0, 7, (3, 20), generator=torch.Generator().manual_seed(1)))
    for key in ("frobenius", "sigma_max", "sigma_min", "inverse_condition"):
        np.testing.assert_allclose(got[key], 1.0, atol=1e-12, err_msg=key)
    np.testing.assert_array_equal(got["rank"], config.n)


def test_measure_reads_finished_runs_and_refuses_others(tmp_path):
    run = tmp_path / "rnn-GL-seed0"
    options = {"dataset": "tinyshakespeare", "steps": 2, "batch": 2, "length": 16, "eval_every": 2, "eval_tokens": 64,
               "checkpoint_every": 2, "group": "GL", "n": 3, "embedding_dim": 5}
    loop.run(build_config("group_rnn", "lm", options), run)
    record = measure([run], tmp_path / "out", length=40, streams=3)
    assert record["runs"]["rnn-GL-seed0"]["arm"] == "rnn-GL" and len(record["runs"]["rnn-GL-seed0"]["sigma_min"]) == 40
    assert json.loads((tmp_path / "out" / "state_spectrum.json").read_text()) == record
    assert (tmp_path / "out" / "state_spectrum.png").exists()
    with pytest.raises(ValueError, match="finished runs"):
        measure([tmp_path / "missing"], tmp_path / "out")


def test_a_blowup_replays_the_run_to_its_failing_step_and_finds_the_first_broken_state(tmp_path):
    run = tmp_path / "rnn-GL-seed0"
    options = {"dataset": "tinyshakespeare", "steps": 2, "batch": 2, "length": 16, "eval_every": 2, "eval_tokens": 64,
               "checkpoint_every": 2, "group": "GL", "n": 3, "embedding_dim": 5}
    loop.run(build_config("group_rnn", "lm", options), run)
    with pytest.raises(ValueError, match="non-finite loss"):
        trace_blowup(run)  # it finished its steps
    config = json.loads((run / "config.json").read_text())
    config["train"]["steps"] = 4  # the replay trains on from the step-2 checkpoint ...
    (run / "config.json").write_text(json.dumps(config))
    checkpoint = torch.load(run / "checkpoint.pt", weights_only=True)
    weight = checkpoint["model"]["cell.state_map.weight"]  # ... with a state feedback that runs away at once
    noise = torch.randn(weight.shape, generator=torch.Generator().manual_seed(0), dtype=weight.dtype)
    checkpoint["model"]["cell.state_map.weight"] = 3.0 * noise
    torch.save(checkpoint, run / "checkpoint.pt")
    (run / "final.json").write_text(json.dumps({"stopped": "training loss not finite at step 3"}))
    trace = trace_blowup(run)
    assert trace["step"] == 3 and 0 < trace["position"] < 16
    assert all(math.isfinite(s) for s in trace["sigma_max_before"]) and trace["coordinates_norm"] > trace["drive_norm"]
    assert json.loads((run / "final.json").read_text()) == {"stopped": "training loss not finite at step 3"}  # on a copy
