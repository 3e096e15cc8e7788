"""``GroupRNNConfig.input_init``: ``spread`` gives every token's first update the
rotation angles it drew, in both trees, and changes nothing else; ``default`` is the old init.

The angles a model drew are re-drawn by replaying its generator: the default init of the same
seed, then ``spread_updates``. The eigenangles are read off the model's own first state
H_1 = H_0 exp(A_v) = exp(A_v) (H_0 = I at init) by ``numpy.linalg.eigvals``.
"""

import json

import numpy as np
import pytest
import torch

from experiments.studies.state_tracking import state_tracking
from experiments.studies.state_tracking.arms import remedy_arms, spread_arms
from experiments.training import loop
from experiments.training.config import build_config
from manifold_impl.group_rnn import GroupRNN as TorchGroupRNN
from manifold_impl.group_rnn import fit_input_map as torch_fit_input_map
from manifold_impl.group_rnn import spread_updates as torch_spread_updates
from manifold_impl.groups import get_group as torch_get_group
from parity_tests.harness import to_torch
from reference.config import GroupRNNConfig
from reference.group_rnn import GroupRNN, fit_input_map, spread_updates
from reference.groups import get_group

# (group, n, block, V, F): the exact fits, F ≥ V (W fitted) and dim g ≤ F < V (E fitted)
EXACT = [("SO", 5, None, 4, 8), ("O", 4, None, 12, 8), ("BO", 6, 3, 3, 8), ("BO", 8, 2, 20, 8),
         ("U", 3, None, 4, 12), ("SU", 3, None, 15, 12), ("SU", 4, None, 3, 6), ("T", 5, None, 12, 8)]
SEED = 4


def _config(group, n, block, vocab, features, input_init="spread", **options):
    return GroupRNNConfig(vocab_size=vocab, group=group, n=n, block=block, embedding_dim=features,
                          input_init=input_init, **{"recurrent": False, **options})


def _expected_angles(group, angles):
    """Sorted eigenangles in (−π, π] of exp(a) for the drawn ``angles [V, m]`` (``spread_updates``)."""
    v = len(angles)
    if group.name in ("U", "T"):
        return np.sort(angles, axis=-1)
    if group.name == "SU":
        return np.sort(np.concatenate([angles, -angles, np.zeros((v, group.n % 2))], axis=-1), axis=-1)
    size = getattr(group, "block", group.n)
    return np.sort(np.concatenate([angles, -angles, np.zeros((v, (group.n // size) * (size % 2)))], axis=-1), axis=-1)


def _first_step_angles(first_states):
    """Sorted eigenangles of H_1 per token: ``[V, n, n] -> [V, n]``."""
    return np.sort(np.angle(np.linalg.eigvals(first_states)), axis=-1)


@pytest.mark.parametrize("group, n, block, vocab, features", EXACT)
def test_reference_first_updates_have_the_drawn_angles(group, n, block, vocab, features):
    config = _config(group, n, block, vocab, features)
    model = GroupRNN(config)
    params = model.init_params(np.random.default_rng(SEED))
    replay = np.random.default_rng(SEED)
    GroupRNN(_config(group, n, block, vocab, features, "default")).init_params(replay)
    _, angles = spread_updates(model.group, vocab, replay)
    assert np.all((angles >= 0) & (angles <= np.pi))
    _, cache = model.forward(params, np.arange(vocab)[:, None])
    np.testing.assert_allclose(_first_step_angles(cache.states[:, 0]), _expected_angles(model.group, angles),
                               rtol=0, atol=1e-10)


@pytest.mark.parametrize("group, n, block, vocab, features", EXACT)
def test_torch_first_updates_have_the_drawn_angles(group, n, block, vocab, features):
    config = _config(group, n, block, vocab, features)
    model = TorchGroupRNN(config, dtype=torch.float64, generator=torch.Generator().manual_seed(SEED))
    replay = torch.Generator().manual_seed(SEED)
    TorchGroupRNN(_config(group, n, block, vocab, features, "default"), dtype=torch.float64, generator=replay)
    _, angles = torch_spread_updates(model.group, vocab, replay, torch.float64)
    with torch.no_grad():
        _, cache = model(torch.arange(vocab)[:, None])
    np.testing.assert_allclose(_first_step_angles(cache.states[:, 0].numpy()),
                               _expected_angles(get_group(group, n, block), angles.numpy()), rtol=0, atol=1e-10)


@pytest.mark.parametrize("vocab, features, fitted", [(6, 8, {"cell.input_map.weight"}),
                                                     (12, 8, {"cell.input_map.weight", "embedding.weight"})])
def test_spread_changes_only_the_fitted_maps_in_both_trees(vocab, features, fitted):
    """F ≥ V: only W moves; F < V: W and E (b is 0 in both inits)."""
    spread, default = (_config("SO", 4, None, vocab, features, init, recurrent=True, mixing="scalar")
                       for init in ("spread", "default"))
    ours, theirs = (GroupRNN(c).init_params(np.random.default_rng(1)) for c in (spread, default))
    torch_ours, torch_theirs = (TorchGroupRNN(c, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
                                .state_dict() for c in (spread, default))
    assert list(ours) == list(theirs) == list(torch_ours) == list(torch_theirs)
    for key in ours:
        assert np.array_equal(ours[key], theirs[key]) == (key not in fitted), key
        assert torch.equal(torch_ours[key], torch_theirs[key]) == (key not in fitted), key
    assert not np.any(ours["cell.input_map.bias"]) and not torch.any(torch_ours["cell.input_map.bias"])


def test_torch_model_runs_the_reference_spread_parameters():
    config = _config("U", 3, None, 5, 7, recurrent=True, readout="prototype")
    reference = GroupRNN(config)
    params = reference.init_params(np.random.default_rng(2))
    model = TorchGroupRNN(config, dtype=torch.float64)
    model.load_state_dict(to_torch(params, torch.float64, "cpu"))
    tokens = np.random.default_rng(0).integers(0, 5, size=(2, 6))
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens))[0].numpy()
    np.testing.assert_allclose(logits, reference.forward(params, tokens)[0], rtol=1e-10, atol=1e-12)


def test_default_is_the_init_without_the_option():
    plain = GroupRNNConfig(vocab_size=5, group="BO", n=4)
    named = GroupRNNConfig(vocab_size=5, group="BO", n=4, input_init="default")
    for a, b in zip(*(GroupRNN(c).init_params(np.random.default_rng(0)).values() for c in (plain, named))):
        assert np.array_equal(a, b)
    torch_a, torch_b = (TorchGroupRNN(c, generator=torch.Generator().manual_seed(0)).state_dict()
                        for c in (plain, named))
    assert all(torch.equal(torch_a[key], torch_b[key]) for key in torch_a)


def _fit(trees, *arrays):
    if trees == "reference":
        return fit_input_map(*arrays)
    return tuple(x.numpy() for x in torch_fit_input_map(*(torch.from_numpy(x) for x in arrays)))


@pytest.mark.parametrize("trees", ["reference", "torch"])
def test_fit_is_the_best_rank_f_one_when_no_exact_one_exists(trees):
    """V > F < dim g: ‖E Wᵀ − C‖_F is Eckart–Young's minimum over rank ≤ F, √(Σ_{i>F} s_i²)."""
    rng = np.random.default_rng(0)
    embedding, weight, targets = rng.standard_normal((9, 4)), rng.standard_normal((6, 4)), rng.standard_normal((9, 6))
    fitted_embedding, fitted = _fit(trees, embedding, weight, targets)
    values = np.linalg.svd(targets, compute_uv=False)
    assert np.linalg.norm(fitted_embedding @ fitted.T - targets) == pytest.approx(np.sqrt(np.sum(values[4:] ** 2)),
                                                                                  rel=1e-10)


@pytest.mark.parametrize("trees", ["reference", "torch"])
def test_fit_keeps_the_embeddings_at_their_default_scale_when_w_is_square(trees):
    """dim g = F < V (S5's SO(8) arm: F = 28 = dim g): solving E = C (W⁺)ᵀ with the default W gave
    embeddings of norm ~3,000; the balanced fit is exact with rows of norm ~√F."""
    rng = np.random.default_rng(0)
    vocab, features = 120, 28
    embedding, weight = rng.standard_normal((vocab, features)), rng.standard_normal((features, features)) / features
    targets = rng.standard_normal((vocab, features))
    fitted_embedding, fitted = _fit(trees, embedding, weight, targets)
    np.testing.assert_allclose(fitted_embedding @ fitted.T, targets, atol=1e-10)
    assert np.max(np.linalg.norm(fitted_embedding, axis=1)) < 3 * np.sqrt(features)


@pytest.mark.parametrize("options, message", [
    ({"group": "GL", "input_init": "spread"}, "compact"),
    ({"input_init": "uniform"}, "unknown input_init"),
])
def test_config_refuses(options, message):
    with pytest.raises(ValueError, match=message):
        GroupRNNConfig(vocab_size=3, **options)


def test_spread_updates_refuse_a_non_compact_group():
    with pytest.raises(ValueError, match="compact"):
        spread_updates(get_group("GL", 3), 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="compact"):
        torch_spread_updates(torch_get_group("GL", 3), 2)


def test_training_smoke_run_with_spread(tmp_path):
    config = build_config("group_rnn", "count", {
        "modulus": 2, "group": "SO", "n": 3, "embedding_dim": 4, "recurrent": False, "input_init": "spread",
        "steps": 2, "batch": 2, "eval_every": 2, "eval_sequences": 2, "eval_max_length": 128})
    loop.run(config, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"]["input_init"] == "spread"
    assert 0 <= json.loads((tmp_path / "run" / "final.json").read_text())["test_accuracy@128"] <= 1


def test_a_checkpoint_recorded_before_the_option_resumes(tmp_path):
    options = {"modulus": 2, "group": "SO", "n": 3, "embedding_dim": 4, "recurrent": False, "steps": 2, "batch": 2,
               "eval_every": 2, "checkpoint_every": 1, "eval_sequences": 2, "eval_max_length": 128}
    directory = tmp_path / "run"
    loop.run(build_config("group_rnn", "count", options), directory)
    record = json.loads((directory / "config.json").read_text())
    del record["model"]["input_init"]
    (directory / "config.json").write_text(json.dumps(record))
    state = torch.load(directory / "checkpoint.pt", weights_only=True)
    state["config"] = json.dumps(record)  # the configuration it holds, as recorded before the option
    torch.save(state, directory / "checkpoint.pt")
    loop.run(build_config("group_rnn", "count", options), directory)  # the same run: no ValueError
    with pytest.raises(ValueError, match="cannot resume .*model.input_init is 'spread' here but 'default'"):
        loop.run(build_config("group_rnn", "count", {**options, "input_init": "spread"}), directory)


def test_state_tracking_preset_has_a_spread_twin_of_every_input_driven_rnn_arm():
    runs = {run.name: run for run in state_tracking.RUNS}
    twins = {name: run for name, run in runs.items() if "-spread-" in name}
    assert len(twins) == len(state_tracking.CELLS) * 4 * len(state_tracking.SEEDS)
    for name, run in twins.items():
        plain = runs[name.replace("-spread-", "-")]
        assert run.options == {**plain.options, "input_init": "spread"} and run.model == plain.model
    assert all("input_init" not in run.options for name, run in runs.items() if name not in twins)
    sized = {"rnn-SO-input": ("group_rnn", GroupRNNConfig(vocab_size=2, group="SO", recurrent=False))}
    assert spread_arms(sized)["rnn-SO-input-spread"][1].input_init == "spread" and remedy_arms(sized) == sized
