"""The gap study's presets: every arm sized to the budget, searched on the decided grid at the full
length, and trained on equal tokens with the stated seeds; its gaps, paired by seed."""

import json
import math

import scipy.stats

from experiments.params_budget import TOLERANCE, parameter_count
from experiments.studies.charlm_v2 import recipe
from experiments.studies.lstm_gap import gaps, screen, shakespeare, study
from experiments.sweep_run import arm_of
from experiments.sweeps import load_sweep
from experiments.training.config import build_config


def test_the_screen_searches_every_arm_on_the_decided_grid_at_full_length():
    sweep = load_sweep("lstm-gap-screen")
    assert sweep.tuning.rates == (1e-3, 3e-3, 1e-2, 3e-2) and sweep.tuning.seed == 0 == min(screen.SEEDS)
    assert sweep.tuning.options == {}  # the search runs are the seed-0 runs
    assert sweep.tuning.extend_edges and sweep.tuning.stability_margin == 0.25
    assert sweep.out == "experiments/results/lstm_gap/screen"
    arms = {arm_of(run.name) for run in sweep.runs}
    assert arms == {"rnn-O16", "rnn-O16-leak", "rnn-O16-gate", "rnn-O12x2", "rnn-BO4", "exprnn", "lstm"}
    assert sorted(run.name for run in sweep.runs) == sorted(f"{arm}-seed{seed}" for arm in arms for seed in (0, 1))


def test_every_screen_arm_fits_the_budget_and_trains_equal_tokens():
    by_arm = {}
    for run in load_sweep("lstm-gap-screen").runs:
        config = build_config(run.model, run.task, run.options)
        assert abs(parameter_count(config.model) - screen.BUDGET) <= TOLERANCE * screen.BUDGET, run.name
        assert [run.options[key] for key in ("steps", "batch", "length")] == [600, 32, 128], run.name
        by_arm.setdefault(arm_of(run.name), config.model)
    assert {arm: by_arm[arm].n for arm in ("rnn-O16", "rnn-O16-leak", "rnn-O16-gate", "rnn-O12x2", "rnn-BO4")} == {
        "rnn-O16": 16, "rnn-O16-leak": 16, "rnn-O16-gate": 16, "rnn-O12x2": 12, "rnn-BO4": 64}
    assert (by_arm["rnn-O16-leak"].forget, by_arm["rnn-O16-leak"].forget_alpha) == ("constant", 0.42)
    assert (by_arm["rnn-O16-gate"].forget, by_arm["rnn-O16-gate"].forget_alpha) == ("gate", 0.45)
    assert by_arm["rnn-O12x2"].num_layers == 2 and by_arm["rnn-BO4"].block == 4
    assert by_arm["rnn-BO4"].state_features == by_arm["rnn-O16"].state_features  # 16 heads of O(4): 256 features


def test_the_study_trains_the_screens_mechanisms_at_200k_with_the_v2_recipe_on_a_grid_grown_past_its_edges():
    sweep = load_sweep("lstm-gap-study")
    assert sweep.tuning.rates == screen.RATES and sweep.tuning.extend_edges and sweep.tuning.options == {}
    assert sweep.tuning.stability_margin == recipe.STABILITY_MARGIN and sweep.out == "experiments/results/lstm_gap/study"
    arms = {arm_of(run.name) for run in sweep.runs}
    assert sorted(run.name for run in sweep.runs) == sorted(f"{arm}-seed{seed}" for arm in arms for seed in (0, 1, 2))
    by_arm = {}
    for run in sweep.runs:
        config = build_config(run.model, run.task, run.options)
        assert abs(parameter_count(config.model) - 200_000) <= TOLERANCE * 200_000, run.name
        assert {key: run.options[key] for key in recipe.TRAINING if key != "lr"} == {
            key: value for key, value in recipe.TRAINING.items() if key != "lr"}, run.name  # the v2 recipe
        by_arm.setdefault(arm_of(run.name), config)
    assert set(by_arm) == {"lstm", "exprnn", "rnn-O22-leak"}  # the heads arm was cut after its first run
    assert study.SEEDS == recipe.SEEDS and study.BUDGET == recipe.BUDGET
    assert by_arm["lstm"].model.hidden_size == 151  # the committed v2 LSTM's size
    leak = by_arm["rnn-O22-leak"].model
    assert (leak.n, leak.embedding_dim) == (22, 225)  # the committed best group arm's shape (o_width)
    assert (leak.forget, leak.forget_alpha, leak.recurrence) == ("constant", screen.LEAK_ALPHA, "fused")
    assert {config.train.map_lr for config in by_arm.values()} == {"n_aware"}



def test_the_shakespeare_cell_trains_the_best_group_arm_and_the_lstm_with_the_studys_recipe():
    """The Penn Treebank cell's arms, shapes, recipe and seeds on Tiny Shakespeare; its search starts from
    two rates and grows past either edge, so every rate of the decided grid stays reachable."""
    sweep = load_sweep("lstm-gap-shakespeare")
    assert sweep.out == "experiments/results/lstm_gap/shakespeare" and sweep.tuning.rates == (1e-3, 3e-3)
    assert sweep.tuning.extend_edges and sweep.tuning.options == {} and sweep.tuning.seed == 0
    assert sweep.tuning.stability_margin == study.TUNING.stability_margin
    assert set(shakespeare.TUNING.rates) < set(screen.RATES)
    assert sorted(run.name for run in sweep.runs) == sorted(
        f"{arm}-seed{seed}" for arm in ("lstm", "rnn-O22-leak") for seed in study.SEEDS)
    ptb = {run.name: run for run in load_sweep("lstm-gap-study").runs}
    for run in sweep.runs:
        assert run.options["dataset"] == "tinyshakespeare", run.name
        config = build_config(run.model, run.task, run.options)
        assert config.model.vocab_size == 65
        assert abs(parameter_count(config.model) - study.BUDGET) <= TOLERANCE * study.BUDGET, run.name
        assert {key: run.options[key] for key in study.TRAINING} == study.TRAINING, run.name
        twin = ptb[run.name].options
        changed = {key for key in set(twin) | set(run.options) if twin.get(key) != run.options.get(key)}
        assert changed <= {"dataset", "embedding_dim", "hidden_size"}, run.name  # only the sizing moves
        if run.model == "group_rnn":
            assert (config.model.n, config.model.forget, config.model.forget_alpha) == (22, "constant", screen.LEAK_ALPHA)


def _fake_run(directory, model, options, seed, windowed, carried):
    directory.mkdir(parents=True)
    config = build_config(model, "lm", {"dataset": "ptb_char", "seed": seed, **options})
    directory.joinpath("config.json").write_text(json.dumps(config.to_json()))
    directory.joinpath("final.json").write_text(json.dumps(
        {"steps": 2000, "best_step": 2000, "test_bits_per_token": windowed, "test_carried_bits_per_token": carried}))


def test_the_gaps_pair_each_arm_with_the_lstm_by_seed_and_take_the_plain_arm_from_its_own_folder(tmp_path):
    """gaps.md's rows against a hand computation: the mean of the per-seed differences and its
    t-interval (scipy's quantile); a seed the LSTM lacks is not paired."""
    lstm, leak, plain = [1.70, 1.80, 1.75], [1.90, 2.10, 1.95], [2.30, 2.40]
    for seed, (a, b) in enumerate(zip(lstm, leak)):
        _fake_run(tmp_path / "study" / f"lstm-seed{seed}", "lstm", {"hidden_size": 8}, seed, a, a + 0.01)
        _fake_run(tmp_path / "study" / f"rnn-O22-leak-seed{seed}", "group_rnn", {"group": "O", "n": 4}, seed, b, b)
    for seed, value in enumerate(plain):
        _fake_run(tmp_path / "plain" / f"{gaps.PLAIN_RUN}-seed{seed}", "group_rnn", {"group": "O", "n": 3}, seed,
                  value, value)
    _fake_run(tmp_path / "plain" / "another-seed0", "group_rnn", {"group": "O", "n": 5}, 0, 9.0, 9.0)
    assert gaps.main(["--study", str(tmp_path / "study"), "--plain", str(tmp_path / "plain")]) == 0
    rows = {row["arm"]: row for row in json.loads((tmp_path / "study" / "gaps.json").read_text())}
    assert set(rows) == {"lstm", "rnn-O22-leak", gaps.PLAIN_ARM}
    differences = [b - a for a, b in zip(lstm, leak)]
    mean = sum(differences) / 3
    half = scipy.stats.t.ppf(0.975, 2) * math.sqrt(sum((d - mean) ** 2 for d in differences) / 2) / math.sqrt(3)
    gap = rows["rnn-O22-leak"]["windowed_gap"]
    assert gap["seeds"] == [0, 1, 2] and math.isclose(gap["difference"], mean) and math.isclose(gap["half_width"], half)
    carried = rows["rnn-O22-leak"]["carried_gap"]
    assert math.isclose(carried["difference"], mean - 0.01)
    assert rows[gaps.PLAIN_ARM]["windowed_gap"]["seeds"] == [0, 1]
    assert math.isclose(rows[gaps.PLAIN_ARM]["windowed_gap"]["difference"], (2.30 - 1.70 + 2.40 - 1.80) / 2)
    assert rows["lstm"]["windowed_gap"] is None
    assert f"+{mean:.3f} ± {half:.3f} (3 seeds)" in (tmp_path / "study" / "gaps.md").read_text()
